"""The readiness wait's log watch (abbench/server/process.py LogWatch): a write to the
server's log ends the nap at once, with inotify and without (the size looked at);
how soon is benchmarks/ready_bench.py's (docs/ready-bench.md), not a test's."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from abbench.server import process


@pytest.mark.parametrize("inotify", [True, False])
def test_a_write_to_the_log_ends_the_nap(tmp_path: Path, inotify: bool) -> None:
    log = tmp_path / "server.log"
    log.write_text("loading\n")
    watch = process.LogWatch(log)
    if not inotify:
        watch.close()  # the fallback: the size looked at between polls
    assert (watch._fd is not None) == inotify
    def say() -> None:
        with log.open("a") as f:
            f.write("model loaded\n")

    writer = threading.Timer(0.05, say)
    writer.start()
    try:
        watch.nap(60.0)  # a nap the write must cut short, or the test hangs
    finally:
        writer.cancel()
        watch.close()
    assert watch.size == len("loading\nmodel loaded\n")
    assert watch.grew_at <= time.perf_counter()


def test_a_quiet_log_naps_the_interval_and_the_watch_closes(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    watch = process.LogWatch(log)
    watch.nap(0.01)
    assert watch.grew_at == float("-inf") and watch.size == 0
    watch.close()
    watch.close()  # twice is harmless (the wait's finally)
    assert watch._fd is None
