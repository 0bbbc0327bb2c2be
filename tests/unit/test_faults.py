"""The reaper on its own (no server, no CLI): it kills a process group only when
abbench vanishes without saying ``done``. Faults with a server: tests/ref/test_faults.py
and tests/real/test_faults.py."""

from __future__ import annotations

import signal
import subprocess

import pytest


@pytest.mark.parametrize("says_done", [True, False])
def test_reaper_kills_the_group_only_when_abbench_vanishes(says_done: bool) -> None:
    import sys

    group = subprocess.Popen(["sleep", "60"], start_new_session=True)
    reaper = subprocess.Popen([sys.executable, "-m", "abbench.server.reaper"],
                              stdin=subprocess.PIPE)
    try:
        assert reaper.stdin is not None
        reaper.stdin.write(f"{group.pid}\n".encode() + (b"done\n" if says_done else b""))
        reaper.stdin.close()  # EOF: what abbench's death looks like to the reaper
        assert reaper.wait(timeout=10) == 0
        if says_done:
            assert group.poll() is None  # a normal stop: the reaper leaves it alone
        else:
            assert group.wait(timeout=10) == -signal.SIGTERM
    finally:
        group.kill()
        group.wait()


def test_reaper_without_a_server_exits() -> None:
    import sys

    reaper = subprocess.Popen([sys.executable, "-m", "abbench.server.reaper"],
                              stdin=subprocess.PIPE)
    assert reaper.stdin is not None
    reaper.stdin.close()
    assert reaper.wait(timeout=10) == 0


