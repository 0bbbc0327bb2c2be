"""Shared fixtures: the reference server, the real llama-server, arms files.

Tests live in folders by layer: ``unit/`` (no server of the project: pure functions, and
some git builds, mounts and subprocesses of small tools), ``ref/``
(CLI runs against the reference server ``refserver.py``), ``real/`` (end to end
against the real llama-server; marked ``real`` here, by folder), and ``golden/``
(the files that pin every renderer).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFSERVER = ROOT / "tests" / "refserver.py"


def refserver_start(*flags: str) -> list[str]:
    """A start argv for the reference server (tests/refserver.py) with ``flags``."""
    return [sys.executable, str(REFSERVER), "--port", "{port}", *flags]


def _realparts(*flags: str) -> dict[str, str]:
    out = subprocess.run(["bash", str(ROOT / "scripts" / "realparts.sh"), *flags], check=True,
                         capture_output=True, text=True).stdout
    found = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {"server": found["LLAMA_SERVER"], "model": found["SMOLLM2_GGUF"]}


@pytest.fixture(scope="session")
def real_parts() -> dict[str, str]:
    """Paths of the real llama-server and SmolLM2 GGUF, built/fetched (and cached)
    by scripts/realparts.sh when the environment does not name them."""
    server, model = os.environ.get("LLAMA_SERVER"), os.environ.get("SMOLLM2_GGUF")
    if server and model and Path(server).exists() and Path(model).exists():
        return {"server": server, "model": model}
    return _realparts()


@pytest.fixture(scope="session")
def real_parts_noavx2() -> dict[str, str]:
    """A second, really slower llama-server build (no AVX2/FMA/F16C), same model."""
    return _realparts("--no-avx2")


def llama_start(parts: dict[str, str], *extra: str, ctx: int = 2048) -> list[str]:
    """A start argv for the real llama-server on one thread (see README: -t 1)."""
    return [parts["server"], "-m", parts["model"], "--host", "{host}", "--port", "{port}",
            "-t", "1", "-c", str(ctx), "-np", "1", "--no-warmup", *extra]


def write_arms(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return tmp_path / "results"


def copy_golden_runs(out: Path) -> Path:
    """A copy of the real H200 run folders of tests/golden/runs/ under ``out``."""
    for run in (ROOT / "tests" / "golden" / "runs").iterdir():
        shutil.copytree(run, out / run.name)
    return out


def no_process_left(pattern: str) -> bool:
    """True when no process whose command line contains ``pattern`` is running."""
    import psutil

    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if pattern in " ".join(p.info["cmdline"] or []):
                return False
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return True


def no_server_left(run: Path) -> bool:
    """True when no server process of ``run`` is alive: the PIDs its slot records name
    (each server life's main process), not every process of some name on the machine."""
    import json

    import psutil

    for line in (run / "samples.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") != "slot" or not isinstance(rec.get("pid"), int):
            continue
        try:
            if psutil.Process(rec["pid"]).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


REAL_DIR = Path(__file__).resolve().parent / "real"


#: tests that run only when asked for by their marker (``-m sglang``): too long for the
#: default run's CI budget, each exercising a real part the default run also covers
OPT_IN = {
    "sglang": "SGLang end to end (4 lives, 4-7 minutes on 2 cores): run with -m sglang",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``real`` marker, by folder: every test under tests/real/. :data:`OPT_IN`
    tests run only when their marker is asked for."""
    expr = config.getoption("markexpr", "") or ""
    for item in items:
        if REAL_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.real)
        for marker, reason in OPT_IN.items():
            if item.get_closest_marker(marker) and marker not in expr:
                item.add_marker(pytest.mark.skip(reason=reason))
