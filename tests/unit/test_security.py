"""Security: no shell unless asked, secrets never written, 127.0.0.1 by default,
markdown escaped, atomic reports, samples appended and flushed one by one."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from abbench.config.arms import placeholder_values, resolve_arms
from abbench.config.loader import load_config
from abbench.errors import StoreError
from abbench.model.records import parse_record, parse_records
from abbench.report.markdown import note_text
from abbench.report.notes import fault_notes
from abbench.report.text import md_escape
from abbench.server.process import start_server
from abbench.store import run as store
from abbench.store.run import Run, atomic_write
from tests.faultkit import meta

# ----------------------------------------------------------------- no shell

RECORD_ARGV = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"


def _start_and_wait(tmp_path: Path, arms_text: str) -> None:
    arms = tmp_path / "arms.yaml"
    arms.write_text(arms_text)
    cfg = load_config(arms)
    arm = resolve_arms(cfg)[0]
    server = start_server(arm, round_=0, log_path=tmp_path / "log",
                          argv_for_port=lambda port: arm.command(
                              placeholder_values(cfg, arm, port=port, round_=0)))
    try:
        server.proc.wait(timeout=30)
    finally:
        server.stop()


def test_no_shell_metacharacters_reach_a_shell(tmp_path: Path) -> None:
    out, pwned = tmp_path / "argv.json", tmp_path / "PWNED"
    evil = f"x; touch {pwned}; $(touch {pwned}) `touch {pwned}` | cat > {pwned}"
    _start_and_wait(tmp_path, yaml.safe_dump({
        "vars": {"evil": evil},
        "arms": [{"name": "a", "start": [sys.executable, "-c", RECORD_ARGV, str(out),
                                         "{evil}", "--port", "{port}", "$HOME"]},
                 {"name": "b", "start": [sys.executable, "-c", "pass", "{port}"]}],
        "workloads": [{"contexts": [64]}]}))
    argv = json.loads(out.read_text())
    assert argv[0] == evil  # the placeholder went into one argv item, as it is
    assert argv[1] == "--port" and argv[2].isdigit() and argv[3] == "$HOME"
    assert not pwned.exists()


def test_a_start_string_is_split_not_run_by_a_shell(tmp_path: Path) -> None:
    out, pwned = tmp_path / "argv.json", tmp_path / "PWNED"
    start = f"{sys.executable} -c \"{RECORD_ARGV}\" {out} --port {{port}} ; touch {pwned}"
    _start_and_wait(tmp_path, yaml.safe_dump({
        "arms": [{"name": "a", "start": start},
                 {"name": "b", "start": [sys.executable, "-c", "pass", "{port}"]}],
        "workloads": [{"contexts": [64]}]}))
    argv = json.loads(out.read_text())
    assert argv[2:] == [";", "touch", str(pwned)]
    assert not pwned.exists()


# ----------------------------------------------------------------- secrets


# ----------------------------------------------------------------- 127.0.0.1


# ----------------------------------------------------------------- markdown


def test_md_escape_pipes_newlines_html() -> None:
    assert md_escape("a|b\nc\r<script>x</script>&") == \
        "a\\|b c &lt;script&gt;x&lt;/script&gt;&amp;"


def test_fault_notes_escape_server_text() -> None:
    meta_ = {"id": "t", "arms": [{"name": "a"}, {"name": "b"}],
             "schedule": [[0, 0, "a"], [0, 1, "b"]]}
    recs = [{"type": "slot", "slot": 0, "arm": "a", "round": 0, "status": "ok"},
            {"type": "slot", "slot": 1, "arm": "b", "round": 0, "status": "failed",
             "reason": "HTTP 500: <b>bad|gateway</b>\nmore"},
            {"type": "sample", "slot": 0, "arm": "a", "round": 0, "valid": False,
             "status": "failed", "workload": "decode 64", "rep": 0, "reason": "x|<i>"}]
    notes = "\n".join(note_text(n) for n in fault_notes(parse_records(recs), meta_))
    assert "&lt;b&gt;bad\\|gateway&lt;/b&gt; more" in notes and "x\\|&lt;i&gt;" in notes
    assert "<b>" not in notes and "<i>" not in notes


# ----------------------------------------------------------------- atomic writes


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    target = tmp_path / "report.md"
    target.write_text("old report\n")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.os, "fsync", no_space)
    with pytest.raises(StoreError, match=r"cannot write report\.md: No space left on device"):
        atomic_write(target, "new report\n")
    assert target.read_text() == "old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]  # no temp file left


def test_reports_and_run_json_are_written_by_rename(tmp_path: Path, results: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    renamed: list[str] = []
    real = os.replace
    monkeypatch.setattr(store.os, "replace",
                        lambda a, b: (renamed.append(Path(b).name), real(a, b))[1])
    run = Run.create(results, {"arms": []}, {"arms": []})
    run.update_meta(status="complete")
    run.write_text("report.md", "# r\n")
    assert renamed == ["config.yaml", "run.json", "run.json", "report.md"]
    assert meta(run.path)["status"] == "complete"


# ----------------------------------------------------------------- samples


SAMPLE = {"type": "sample", "arm": "a", "round": 0, "workload": "w"}


def test_each_sample_is_appended_and_fsynced(tmp_path: Path, results: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run.create(results, {"arms": []}, {})
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(store.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    for i in range(3):
        run.append(parse_record({**SAMPLE, "i": i}))
        assert len(synced) == i + 1
        # another reader sees it at once
        assert json.loads(run.samples_path.read_text().splitlines()[-1])["i"] == i


def test_a_failed_append_leaves_no_half_line(tmp_path: Path, results: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run.create(results, {"arms": []}, {})
    run.append(parse_record({**SAMPLE, "i": 0}))
    before = run.samples_path.read_bytes()
    real = os.write
    calls = {"n": 0}

    def half_then_full(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real(fd, bytes(data[:10]))  # part of the line fits ...
        raise OSError(errno.ENOSPC, "No space left on device")  # ... then the disk is full

    monkeypatch.setattr(store.os, "write", half_then_full)
    with pytest.raises(StoreError) as e:
        run.append(parse_record({**SAMPLE, "i": 1}))
    assert "cannot append a sample: No space left on device" in str(e.value)
    assert f"abbench run --resume {run.id}" in str(e.value)
    assert run.samples_path.read_bytes() == before
    monkeypatch.setattr(store.os, "write", real)
    run.append(parse_record({**SAMPLE, "i": 2}))
    assert [r.data()["i"] for r in run.records()] == [0, 2]
