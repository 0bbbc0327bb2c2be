"""Real builds from git refs: llama-server of two commits of the llama.cpp history that
scripts/llama-git-repo.sh makes (``base`` and ``slow``), built with CMake and ccache by
abbench.server.build into the build cache ($ABBENCH_BUILD_CACHE), then run.

The first run builds (about 6 minutes cold on 2 cores, then about a minute for the
second ref with ccache warm); later runs are cache hits. The measured times are in
docs/build-bench.md (benchmarks/build_bench.py), never asserted here: a hit is shown by
what it does (the entry built before, used once more), not by how fast it was."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from abbench.server.build import ensure_built
from abbench.server.buildcache import list_builds
from abbench.server.git import GitRef
from abbench.server.recipes import llama_cpp
from tests.conftest import CPU_HEAVY
from tests.gitkit import llama_git_repo

pytestmark = CPU_HEAVY


@pytest.fixture(scope="module")
def llama_repo() -> Path:
    """The four-commit llama.cpp repository (made once, reused), ccache installed."""
    return llama_git_repo()


def test_base_and_slow_build_run_and_hit_the_cache(llama_repo: Path) -> None:
    source = llama_cpp(str(llama_repo))
    jobs = int(os.environ.get("JOBS") or os.cpu_count() or 1)
    built = {ref: ensure_built(GitRef(source.name, ref), source, jobs=jobs)
             for ref in ("base", "slow")}
    assert built["base"].sha != built["slow"].sha
    assert built["base"].dir != built["slow"].dir
    for ref, arm in built.items():
        server = arm.artifacts["llama-server"]
        assert server.is_file() and os.access(server, os.X_OK), ref
        out = subprocess.run([str(server), "--version"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, (ref, out.stderr)
        # llama.cpp's build-info records the commit of the worktree it was built from
        assert f"commit {arm.sha[:7]}" in out.stdout + out.stderr, (ref, out.stderr)
        assert "abbench build of llama.cpp" in arm.log.read_text()

    hits = {e.path: e.hits for e in list_builds()}
    again = ensure_built(GitRef(source.name, "base"), source, jobs=jobs)
    assert again.cached and again.dir == built["base"].dir
    (entry,) = [e for e in list_builds() if e.path == again.dir]
    assert entry.complete and entry.hits == hits[again.dir] + 1
