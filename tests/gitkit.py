"""A git repository whose commits change the reference server's decode rate, and
arms files that build arms from it (for the git-arm and bisect tests); the real
llama.cpp history of scripts/llama-git-repo.sh in the build cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from abbench.server.git import cache_root

REFSERVER = Path(__file__).parent / "refserver.py"
_GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]

SERVE = f"""#!/bin/sh
here=$(dirname "$0")
exec {sys.executable} "$here/refserver.py" --rate "$(cat "$here/rate")" "$@"
"""


def llama_git_repo() -> Path:
    """The four-commit llama.cpp repository of scripts/llama-git-repo.sh (tags base,
    noop1, slow, noop2), made once in the build cache (``ABBENCH_BUILD_CACHE``: a test
    session's own state folder never holds it) and reused; ccache installed."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "llama-git-repo.sh"
    out = subprocess.run(["bash", str(script), str(cache_root() / "test-repos" / "llama-git")],
                         check=True, capture_output=True, text=True).stdout
    return Path(out.strip().rsplit("=", 1)[1])


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*_GIT, "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def rate_repo(repo: Path, rates: list[float]) -> list[str]:
    """A repository with one commit per rate (the first is tagged ``good``, the last
    ``bad``; every other commit also touches a NOTES file); returns the commit ids."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "refserver.py").write_text(REFSERVER.read_text())
    (repo / "serve").write_text(SERVE)
    (repo / "serve").chmod(0o755)
    shas = []
    for i, rate in enumerate(rates):
        (repo / "rate").write_text(f"{rate:g}\n")
        (repo / "NOTES").write_text(f"commit {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"c{i}: rate {rate:g}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    git(repo, "tag", "good", shas[0])
    git(repo, "tag", "bad", shas[-1])
    return shas


def source(repo: Path | str) -> dict[str, Any]:
    return {"repo": str(repo),
            "build": ["cp {src}/refserver.py {src}/rate {src}/serve {build}/"],
            "artifacts": ["serve"]}


def git_arms(path: Path, repo: Path | str, arms: dict[str, dict[str, Any]], **top: Any) -> Path:
    """An arms file of git arms on ``repo`` (a path or a URL): name -> git: fields
    (source defaults to ref)."""
    doc: dict[str, Any] = {
        "rounds": 2, "warmup": 1, "seed": 7,
        "defaults": {"preset": "llama.cpp", "ready": {"timeout": 20, "interval": 0.02},
                     "stop_grace": 3, "start": ["{bin}", "--port", "{port}"]},
        "sources": {"ref": source(repo)},
        "arms": [{"name": n, "git": {"source": "ref", **g}} for n, g in arms.items()],
        "workloads": [{"contexts": [64], "decode_tokens": 16}],
        **top,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
