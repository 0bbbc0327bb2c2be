"""No server outlives abbench, whatever its processes do to leave its process group:
a child that calls setsid() and serves the port (``server &``, daemon(3)), a double
fork, a main that exits at once, a grandchild that also clears its environment, and
processes that ignore TERM; abbench stopped normally or killed (the reaper)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.faultkit import (
    cli,
    cli_start,
    find_run,
    lines,
    meta,
    only_run,
    own_refserver,
    ref_arms,
    samples,
    wait_for,
    wait_gone_matching,
)


@pytest.mark.parametrize("flags", [["--daemon", "wait"], ["--daemon", "double"],
                                   ["--daemon", "clearenv"],
                                   ["--daemon", "double", "--ignore-term-all"]],
                         ids=["setsid-child", "double-fork", "cleared-env", "ignores-term"])
def test_a_server_whose_child_leaves_the_group_is_measured_and_stopped(
        tmp_path: Path, results: Path, flags: list[str]) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": flags, "b": []}, rounds=2,
                    defaults={"stop_grace": 1})
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    assert "not from this arm's server" not in p.stderr  # its own child is no stray
    run = only_run(results)
    assert len(samples(run)) == 8
    log = (run / "logs" / "a-r0.log").read_text()
    if flags[1] == "clearenv":  # no token, no parent link: found by the port it holds
        assert "it listened on the life's port" in log
    else:
        assert "stopping processes that left the server's group: pid" in log
    wait_gone_matching(str(ref), timeout=5)


def test_a_server_that_daemonizes_is_refused_clearly_and_stopped(tmp_path: Path,
                                                                 results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": ["--daemon", "exit"], "b": []},
                    rounds=1)
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 1, p.stderr
    assert "main process exited (code 0) before it was ready, leaving pid" in p.stderr
    assert "drop '&', --daemon or daemonize from the start command" in p.stderr
    assert "Traceback" not in p.stderr
    wait_gone_matching(str(ref), timeout=5)


def test_sigkill_of_abbench_stops_the_setsid_children_too(tmp_path: Path,
                                                          results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref,
                    {"a": ["--daemon", "double", "--rate", "20"],
                     "b": ["--daemon", "wait", "--rate", "20"]}, rounds=4)
    proc = cli_start("run", arms, "--results", results, "--plain", out=tmp_path / "abbench")
    run = wait_for(lambda: find_run(results), 60, "the run folder")
    wait_for(lambda: lines(run), 60, "a record")
    proc.kill()
    proc.wait()
    wait_gone_matching(str(ref), timeout=10)  # the reaper, by the life's token
    assert meta(run)["status"] == "running"


def test_the_reaper_kills_marked_processes_in_other_sessions(tmp_path: Path) -> None:
    """The reaper alone: EOF without ``done`` kills the group and a setsid process that
    carries the life's token."""
    import os
    import subprocess
    token = "test-" + os.urandom(4).hex()
    tag = str(tmp_path / "escaped-marker")
    group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    escaped = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep(60)  # {tag}"],
        start_new_session=True, env={**os.environ, "ABBENCH_LIFE": token})
    reaper = subprocess.Popen([sys.executable, "-m", "abbench.server.reaper", token],
                              stdin=subprocess.PIPE)
    try:
        assert reaper.stdin is not None
        reaper.stdin.write(f"{group.pid}\n".encode())
        reaper.stdin.close()
        assert reaper.wait(timeout=15) == 0
        for p in (group, escaped):
            assert p.wait(timeout=5) is not None
    finally:
        for p in (group, escaped):
            p.kill()
            p.wait()
