"""A followed log: every line appended while the block runs reaches the callback, the
last one even without its newline; lines written before the block are not repeated."""

from __future__ import annotations

from pathlib import Path

from abbench.server.follow import follow


def test_every_line_written_during_the_block_is_echoed(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("an earlier build\n")
    got: list[str] = []
    with follow(log, got.append, period=0.01), open(log, "a") as out:
        for i in range(500):
            out.write(f"line {i}\n")
            out.flush()
        out.write("no newline at the end")
    assert got == [f"line {i}" for i in range(500)] + ["no newline at the end"]


def test_a_log_never_written_echoes_nothing(tmp_path: Path) -> None:
    got: list[str] = []
    with follow(tmp_path / "never.log", got.append, period=0.01):
        pass
    assert got == []
