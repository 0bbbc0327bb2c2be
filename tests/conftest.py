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
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from abbench.server.git import cache_root
from abbench.server.tree import alive, life_of, marked

ROOT = Path(__file__).resolve().parent.parent
REFSERVER = ROOT / "tests" / "refserver.py"

#: the environment variable naming this test session's own state folder: ABBENCH_CACHE
#: points inside it (so does the local Slurm cluster's state, $ABBENCH_CACHE/slurm),
#: while the builds (llama-server, the vLLM and SGLang venvs, the llama.cpp git history,
#: git-arm builds and ccache) stay in the build cache, ABBENCH_BUILD_CACHE
SESSION_VAR = "ABBENCH_TEST_SESSION"
#: the Slurm ports scripts/slurm-local.sh reads: free ones per session, so that its
#: cluster never meets one the user keeps on the default ports
SLURM_PORTS = ("ABBENCH_SLURMCTLD_PORT", "ABBENCH_SLURMD_PORT", "ABBENCH_SLURMDBD_PORT",
               "ABBENCH_SLURM_DB_PORT")
#: the default results folders (``--results`` left out), which no test may write
DEFAULT_RESULTS = tuple(dict.fromkeys([Path.cwd() / "results", ROOT / "results"]))
_OWNED = pytest.StashKey[tuple[Path, dict[str, str | None]]]()


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _check_grouping(config: pytest.Config) -> None:
    """``--dist loadgroup`` under pytest 9.2 and pytest-xdist 3.8 ignores every
    ``xdist_group`` without a word (pytest-dev/pytest-xdist#1386): refuse it."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    from importlib.metadata import version

    def major_minor(pkg: str) -> tuple[int, ...]:
        return tuple(int(x) for x in version(pkg).split(".")[:2] if x.isdigit())

    if major_minor("pytest") >= (9, 2) and major_minor("pytest-xdist") <= (3, 8):
        raise pytest.UsageError(
            f"pytest {version('pytest')} with pytest-xdist {version('pytest-xdist')} "
            "ignores xdist_group under --dist loadgroup (pytest-dev/pytest-xdist#1386): "
            "run bash scripts/setup.sh, which installs the pytest pyproject.toml names")


def pytest_configure(config: pytest.Config) -> None:
    """This session's own state folder, removed at its end (its Slurm cluster stopped
    first, whichever worker started it): ABBENCH_CACHE (anything abbench and the
    scripts keep besides builds) points there, ABBENCH_BUILD_CACHE at the build cache
    the user named (ABBENCH_BUILD_CACHE, else ABBENCH_CACHE, else ~/.cache/abbench),
    which is never rebuilt for it. An xdist worker inherits its controller's folder."""
    _check_grouping(config)
    if os.environ.get(SESSION_VAR):
        return
    build = str(cache_root())  # abbench's own rule, before ABBENCH_CACHE moves
    folder = Path(tempfile.mkdtemp(prefix="abbench-test-session-"))
    names = (SESSION_VAR, "ABBENCH_BUILD_CACHE", "ABBENCH_CACHE", *SLURM_PORTS)
    config.stash[_OWNED] = (folder, {k: os.environ.get(k) for k in names})
    os.environ.update({SESSION_VAR: str(folder), "ABBENCH_BUILD_CACHE": build,
                       "ABBENCH_CACHE": str(folder / "cache")})
    for name, port in zip(SLURM_PORTS, _free_ports(len(SLURM_PORTS)), strict=True):
        os.environ.setdefault(name, str(port))


def pytest_report_header(config: pytest.Config) -> str:
    return (f"abbench: builds in {os.environ.get('ABBENCH_BUILD_CACHE')}, this session's "
            f"state in {os.environ.get(SESSION_VAR)}")


def pytest_unconfigure(config: pytest.Config) -> None:
    owned = config.stash.get(_OWNED, None)
    if owned is None:
        return
    folder, before = owned
    if (folder / "cache" / "slurm" / "slurm.conf").exists():  # the session's Slurm cluster
        subprocess.run(["bash", str(ROOT / "scripts" / "slurm-local.sh"), "down"],
                       capture_output=True, check=False, timeout=120)
    shutil.rmtree(folder, ignore_errors=True)
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def results_stamp(folder: Path) -> tuple[object, ...]:
    """What any write to a results folder changes: its own entries (a run folder, the
    index or its journal made, renamed or removed: the folder's mtime) and the index."""
    def stat(p: Path) -> tuple[int, int] | None:
        try:
            st = p.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    return stat(folder), stat(folder / "index.sqlite")


@pytest.fixture(autouse=True)
def _default_results_untouched() -> Iterator[None]:
    """No test writes the default results folder (./results): each passes --results."""
    before = [results_stamp(f) for f in DEFAULT_RESULTS]
    yield
    touched = [str(f) for f, b in zip(DEFAULT_RESULTS, before, strict=True)
               if results_stamp(f) != b]
    if touched:
        pytest.fail(f"this test wrote the default results folder {', '.join(touched)}: "
                    "give its commands --results under tmp_path")


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


#: the environment variable naming the test that started a process: set for each test
#: (:func:`_tag_the_test`), so every process it starts, and all they start (abbench, its
#: servers, their children, orphans after a kill) carry it, and no other process does
TEST_VAR = "ABBENCH_TEST_TAG"


@pytest.fixture(autouse=True)
def _tag_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_VAR, uuid.uuid4().hex)


def started_pids(*, servers: bool = False) -> set[int]:
    """The live processes this test started (at any depth: they carry its tag), this
    one aside; ``servers``: only the server lives' processes (abbench marks each life's
    environment, :data:`abbench.server.tree.LIFE_VAR`)."""
    found = marked(os.environ[TEST_VAR], TEST_VAR)
    return {p for p in alive(found) if life_of(p) is not None} if servers else alive(found)


def server_pids(run: Path) -> set[int]:
    """The main process of each server life ``run`` recorded (its slot records' pid)."""
    import json

    pids = set()
    for line in (run / "samples.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "slot" and isinstance(rec.get("pid"), int):
            pids.add(rec["pid"])
    return pids


def no_process_left(pids: Iterable[int]) -> bool:
    """True when none of ``pids`` is running (zombies are not: they only wait to be
    reaped): the PIDs a test started, never every process of some name on the machine."""
    return not alive(pids)


def no_server_left(run: Path) -> bool:
    """True when no server life of ``run`` is alive: the PIDs its slot records name, and
    any process this test started that carries a server life's mark."""
    return no_process_left(server_pids(run) | started_pids(servers=True))


REAL_DIR = Path(__file__).resolve().parent / "real"


#: tests that run only when asked for by their marker (``-m sglang``): too long for the
#: default run's CI budget, each exercising a real part the default run also covers
OPT_IN = {
    "sglang": "SGLang end to end (4 lives, 4-7 minutes on 2 cores): run with -m sglang",
}


#: the tests that want both cores, one after another on one worker (scripts/test.sh's
#: --dist loadgroup): the llama.cpp git builds (-j 2; the builds of a source take turns
#: under a lock, so on two workers one would only wait for the other's) and vLLM's
#: campaign, whose servers run at nice 10 (in a warm run beside the other worker's tests,
#: the builds among them, its trace TTFT read 5-14 s a round against 2-6 s before)
CPU_HEAVY = pytest.mark.xdist_group("cpu-heavy")

#: the slowest tests, by where they live, slowest first (measured, warm: vLLM's campaign
#: 13 minutes, the real suite 30 seconds to 4 minutes a test, the 30-run history 80
#: seconds; cold, the git-ref builds about 10 minutes): they start first, so that the two
#: workers end on short tests together rather than one on a long test alone
SLOW_FIRST = ("real/test_vllm_e2e.py", "real/test_build.py", "real/", "browser/",
              "ref/test_history_acceptance.py", "ref/test_capacity.py")


def _slowness(item: pytest.Item) -> int:
    where = Path(str(item.fspath)).resolve().relative_to(ROOT / "tests").as_posix()
    return next((i for i, part in enumerate(SLOW_FIRST) if where.startswith(part)),
                len(SLOW_FIRST))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``real`` marker, by folder: every test under tests/real/. :data:`OPT_IN`
    tests run only when their marker is asked for. The :data:`SLOW_FIRST` tests first.

    Under pytest-xdist (``-n 2 --dist loadgroup``, as scripts/test.sh runs it) each
    worker holds at most 3 tests and takes the next as it frees: two real servers may
    run at once, each on its one thread."""
    expr = config.getoption("markexpr", "") or ""
    for item in items:
        if REAL_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.real)
        for marker, reason in OPT_IN.items():
            if item.get_closest_marker(marker) and marker not in expr:
                item.add_marker(pytest.mark.skip(reason=reason))
    items.sort(key=_slowness)  # stable: the collection's order within each part
