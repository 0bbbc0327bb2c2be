"""Helpers for the fault, resume and bad-input tests: run the real CLI as a
process, read a run's files strictly, watch processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REFSERVER, no_process_left, started_pids


def cli(*args: str | Path, cwd: Path | None = None, timeout: float = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``abbench ARGS`` as a child process; its output, code and text."""
    return subprocess.run([sys.executable, "-m", "abbench.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def cli_start(*args: str | Path, out: Path) -> subprocess.Popen[bytes]:
    """``abbench ARGS`` started in the background; stdout/stderr to ``out``.{out,err}."""
    return subprocess.Popen([sys.executable, "-m", "abbench.cli", *map(str, args)],
                            stdout=open(f"{out}.out", "wb"),
                            stderr=open(f"{out}.err", "wb"))


def wait_for(cond: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_gone(timeout: float = 15) -> None:
    """Assert that no server process this test started is left (by PID: those carrying
    this test's tag and a server life's mark), waiting up to ``timeout`` seconds."""
    try:
        wait_for(lambda: no_process_left(started_pids(servers=True)), timeout,
                 "no server process of this test")
    except AssertionError as e:
        raise AssertionError(f"{e}; left: {_described(started_pids(servers=True))}") from None


def wait_gone_matching(pattern: str, timeout: float = 15) -> None:
    """Assert that no process whose command line holds ``pattern`` (a path inside this
    test's own tmp folder) is left: for a grandchild that cleared its environment and
    left its parent, which no PID this test knows leads to (the escape tests)."""
    def matching() -> set[int]:
        import psutil
        return {p.pid for p in psutil.process_iter(["cmdline"])
                if pattern in " ".join(p.info["cmdline"] or [])}

    try:
        wait_for(lambda: no_process_left(matching() | started_pids(servers=True)), timeout,
                 f"no process matching {pattern!r}")
    except AssertionError as e:
        raise AssertionError(f"{e}; left: {_described(matching())}") from None


def _described(pids: set[int]) -> list[tuple[int, str, str]]:
    import psutil
    out = []
    for pid in sorted(pids):
        try:
            p = psutil.Process(pid)
            out.append((pid, p.status(), " ".join(p.cmdline())[:200]))
        except psutil.Error:
            continue
    return out


def find_run(results: Path) -> Path | None:
    """The run folder under ``results`` once run.json exists, else None."""
    if not results.is_dir():
        return None
    runs = [p for p in results.iterdir() if (p / "run.json").is_file()]
    return runs[0] if len(runs) == 1 else None


def only_run(results: Path) -> Path:
    runs = [p for p in results.iterdir() if (p / "run.json").is_file()]
    assert len(runs) == 1, runs
    return runs[0]


def lines(run: Path) -> list[dict[str, Any]]:
    """Every line of samples.jsonl, parsed strictly: a half line fails the test. A run
    folder whose first record is not written yet has none."""
    path = run / "samples.jsonl"
    if not path.exists():
        return []
    text = path.read_text()
    assert text == "" or text.endswith("\n"), "samples.jsonl ends in a half line"
    return [json.loads(line) for line in text.splitlines()]


def samples(run: Path) -> list[dict[str, Any]]:
    return [r for r in lines(run) if r["type"] == "sample"]


def slots(run: Path) -> list[dict[str, Any]]:
    return [r for r in lines(run) if r["type"] == "slot"]


def meta(run: Path) -> dict[str, Any]:
    return json.loads((run / "run.json").read_text())


def own_refserver(tmp_path: Path) -> Path:
    """A copy of the reference server under ``tmp_path``: its path marks this test's
    server processes, so process checks never see another test's servers."""
    dst = tmp_path / "refserver_copy.py"
    shutil.copy(REFSERVER, dst)
    return dst


def ref_arms(path: Path, server: Path, arms: dict[str, list[str]], **top: Any) -> Path:
    """An arms file of reference-server arms: name -> extra refserver flags."""
    defaults = {"preset": "llama.cpp", "ready": {"timeout": 20, "interval": 0.02},
                "stop_grace": 3, **top.pop("defaults", {})}
    doc = {
        "rounds": 2, "warmup": 1, "seed": 7,
        "defaults": defaults,
        "arms": [{"name": n, "start": [sys.executable, str(server), "--port", "{port}", *flags]}
                 for n, flags in arms.items()],
        "workloads": [{"contexts": [64, 128], "decode_tokens": 16}],
        **top,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def send(proc: subprocess.Popen[bytes], sig: signal.Signals, timeout: float = 60) -> int:
    proc.send_signal(sig)
    return proc.wait(timeout=timeout)
