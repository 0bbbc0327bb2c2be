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




def test_start_times_are_compared_on_one_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil counts a process's start from the boot time in whole seconds, so its start
    times can read up to a second before time.time() (1.0 s on the machine of a cold
    run, 2026-12-03): a server's child that cleared its environment, started after the
    server, read as an older stray holding the life's port, and the run failed. The
    start times are compared with the server's own, on psutil's clock."""
    import socket
    import sys
    import time

    import psutil

    from abbench.server import ports

    real = psutil.Process.create_time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) - 0.95)
    leader = subprocess.Popen(["sleep", "30"], start_new_session=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); "
            "s.listen(); print('up', flush=True); time.sleep(30)")
    wall = time.time()
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             start_new_session=True, env={})  # no token, no group of ours
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        clock = ports.start_time(leader.pid)
        assert clock is not None and clock < wall - 0.5  # the clock reads early
        assert ports.foreign_listener(port, clock, leader.pid) is None
        assert ports.foreign_listener(port, wall, leader.pid) == \
            f"pid {child.pid} ({psutil.Process(child.pid).name()})"  # against the wall clock
    finally:
        for p in (leader, child):
            p.kill()
            p.wait()


def test_a_server_killed_under_a_request_is_seen_dead() -> None:
    """A server killed under a request resets the connection as it is torn down, a
    moment before its process can be reaped: after a failed request the life waits
    DEATH_GRACE_S for it to exit, so the life fails instead of going on to end "ok"
    (a kill -9 mid-decode once ended a real run with exit code 0)."""
    import time
    from pathlib import Path
    from types import SimpleNamespace

    from abbench.campaign.health import DEATH_GRACE_S, _server_trouble
    from abbench.server.process import Server

    def server(proc: subprocess.Popen[bytes]) -> Server:
        return Server(arm=None, round=0, port=0, log_path=Path("/dev/null"),  # type: ignore[arg-type]
                      proc=proc, reaper=None, started_at=0.0)

    live = subprocess.Popen(["sleep", "60"])
    try:
        t0 = time.perf_counter()
        assert server(live).alive(0.2) and time.perf_counter() - t0 < 5
    finally:
        live.kill()
        live.wait()
    dying = subprocess.Popen(["sleep", "60"])
    dying.kill()
    assert not server(dying).alive(DEATH_GRACE_S) and dying.returncode == -signal.SIGKILL

    # a process that is only reaped after a wait: read as alive at once, dead with grace
    class Late:
        returncode: int | None = None

        def poll(self) -> int | None:
            return self.returncode

        def wait(self, timeout: float) -> int:
            assert timeout == DEATH_GRACE_S
            self.returncode = -9
            return -9

    late = SimpleNamespace(proc=Late())
    late.alive = lambda grace=0.0: Server.alive(late, grace)  # type: ignore[arg-type]
    assert late.alive()
    assert _server_trouble(late, 1.0, probe=False) == "the server died (exit code -9)"  # type: ignore[arg-type]
