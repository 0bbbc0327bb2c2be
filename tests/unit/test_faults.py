"""Faults the reference server causes (tests/refserver.py --fault) and faults of
abbench itself (signals, results directory): exit code, message, samples kept,
no server left. The same faults in the real llama-server: test_faults_real.py."""

from __future__ import annotations

import signal
import subprocess

import pytest

# ------------------------------------------------------------- server start-up


# ------------------------------------------------------------ bad responses


# ------------------------------------------------------------ signals to abbench


# ------------------------------------------------------------ results directory


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


