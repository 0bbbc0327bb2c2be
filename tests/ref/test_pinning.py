"""An arm's ``cpus:`` and ``nice:`` on the reference server: the started process is
pinned and niced (its /proc status says so), ABBENCH_CPUS is in its environment, run.json
records both, and CPUs this machine lacks stop ``run`` before any server starts."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from typer.testing import CliRunner

from abbench.cli import app
from abbench.config.arms import ResolvedArm, resolve_arms
from abbench.config.loader import config_from_data
from abbench.config.values import format_cpus
from abbench.server.process import start_server
from tests.conftest import REFSERVER, refserver_start, write_arms


def _cpu() -> int:
    """One CPU this process may use: pinning to it narrows the set where there are two."""
    return min(os.sched_getaffinity(0))


def _status(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _nice_of(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def test_started_server_is_pinned_and_niced(tmp_path: Path) -> None:
    cpu = _cpu()
    cfg = config_from_data({
        "defaults": {"preset": "llama.cpp", "ready": {"timeout": 20}, "stop_grace": 3},
        "arms": [{"name": "a", "start": refserver_start(), "cpus": str(cpu), "nice": 3},
                 {"name": "b", "start": refserver_start()}],
        "workloads": [{"contexts": [64]}]}, source=str(tmp_path / "arms.yaml"))
    pinned, free = resolve_arms(cfg)
    assert pinned.cpus == [cpu] and pinned.nice == 3 and free.cpus is None
    own_nice = _nice_of(0)
    servers = []
    try:
        for arm in (pinned, free):
            def argv(port: int, a: ResolvedArm = arm) -> list[str]:
                return a.command({"port": str(port), "host": a.host})
            s = start_server(arm, round_=0, log_path=tmp_path / f"{arm.name}.log",
                             argv_for_port=argv)
            servers.append(s)
            s.wait_ready()
        s_pinned, s_free = servers
        assert _status(s_pinned.pid, "Cpus_allowed_list") == str(cpu)
        assert _nice_of(s_pinned.pid) == min(19, own_nice + 3)
        # every thread of the server (its HTTP handler threads too) inherits both
        for task in Path(f"/proc/{s_pinned.pid}/task").iterdir():
            assert _status(s_pinned.pid, "Cpus_allowed_list") == _status(
                int(task.name), "Cpus_allowed_list")
        env = Path(f"/proc/{s_pinned.pid}/environ").read_bytes().split(b"\0")
        assert f"ABBENCH_CPUS={cpu}".encode() in env
        # the arm without cpus/nice runs as abbench does
        assert _status(s_free.pid, "Cpus_allowed_list") == format_cpus(
            sorted(os.sched_getaffinity(0)))
        assert _nice_of(s_free.pid) == own_nice
        assert not any(e.startswith(b"ABBENCH_CPUS=") for e in
                       Path(f"/proc/{s_free.pid}/environ").read_bytes().split(b"\0"))
    finally:
        for s in servers:
            s.stop()


def _shell_arms(tmp_path: Path, cpus: str, nice: int = 2) -> Path:
    """A shell start that notes its own (the server's: it execs) status before exec."""
    note = tmp_path / "seen.txt"
    start = (f"echo \"$ABBENCH_ARM env=$ABBENCH_CPUS $(grep Cpus_allowed_list /proc/$$/status"
             f" | tr -d '\\t') nice=$(cut -d' ' -f19 /proc/$$/stat)\" >> {note}; "
             f"exec {sys.executable} {REFSERVER} --port $ABBENCH_PORT --rate 2000")
    return write_arms(tmp_path / "arms.yaml", f"""
        rounds: 1
        seed: 3
        warmup: 0
        defaults: {{preset: llama.cpp, ready: {{timeout: 20}}, stop_grace: 3, shell: true}}
        arms:
          - {{name: pinned, start: {json.dumps(start)}, cpus: "{cpus}", nice: {nice}}}
          - {{name: free, start: {json.dumps(start)}}}
        workloads:
          - contexts: [32]
            decode_tokens: 8
        """)


def test_run_pins_the_arm_and_records_it(tmp_path: Path) -> None:
    cpu = _cpu()
    results = tmp_path / "results"
    res = CliRunner().invoke(app, ["run", str(_shell_arms(tmp_path, str(cpu))), "--results",
                                   str(results), "--plain"])
    assert res.exit_code == 0, res.output
    own_nice = _nice_of(0)
    seen = dict(line.split(" ", 1) for line in (tmp_path / "seen.txt").read_text().splitlines())
    assert seen["pinned"] == f"env={cpu} Cpus_allowed_list:{cpu} nice={min(19, own_nice + 2)}"
    assert seen["free"].startswith("env= Cpus_allowed_list:")
    meta = json.loads(next(results.glob("*/run.json")).read_text())
    arms = {a["name"]: a for a in meta["arms"]}
    assert arms["pinned"]["cpus"] == str(cpu) and arms["pinned"]["nice"] == 2
    assert "cpus" not in arms["free"] and "nice" not in arms["free"]


def test_cpus_this_machine_lacks(tmp_path: Path) -> None:
    beyond = (os.cpu_count() or 1) + 3
    arms = _shell_arms(tmp_path, f"0,{beyond}")
    res = CliRunner().invoke(app, ["run", str(arms), "--results", str(tmp_path / "r"),
                                   "--plain"])
    assert res.exit_code == 2, res.output
    assert f"cpus {beyond} do not exist here" in res.output
    assert not (tmp_path / "seen.txt").exists()  # no server started
    res = CliRunner().invoke(app, ["validate", str(arms)])
    assert res.exit_code == 0, res.output
    assert f"warning: {arms}: arms[0] (pinned).cpus: cpus {beyond} do not exist here" \
        in res.output
    assert f"cpus 0,{beyond}, nice +2" in res.output
