"""Arms built from git refs (reference server): validate pins, build, run, cache, resume,
errors."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.faultkit import cli, only_run
from tests.gitkit import git, git_arms, rate_repo


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"ABBENCH_BUILD_CACHE": str(tmp_path / "cache"), "ABBENCH_CCACHE": "0"}


def test_build_run_cache_and_pins(tmp_path: Path, env: dict[str, str]) -> None:
    shas = rate_repo(tmp_path / "repo", [400, 400, 100])
    arms = git_arms(tmp_path / "arms.yaml", tmp_path / "repo",
                    {"base": {"ref": "good"}, "pr": {"ref": "main"}})
    # pr runs its server from the source tree: {src} outlives the build
    doc = yaml.safe_load(arms.read_text())
    doc["arms"][1]["start"] = ["{src}/serve", "--port", "{port}"]
    arms.write_text(yaml.safe_dump(doc, sort_keys=False))
    p = cli("validate", arms, env=env)
    assert p.returncode == 0, p.stderr
    assert f"base: ref good -> {shas[0]}" in p.stdout and f"pr: ref main -> {shas[2]}" in p.stdout
    p = cli("build", arms, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("-> built") == 2, p.stdout
    # the build log went to stderr as it was written: each step's command and its end
    assert "build base: " in p.stderr and p.stderr.count("  | # step 1/") == 2, p.stderr
    p = cli("build", arms, env=env)
    assert p.stdout.count("cache hit") == 2, p.stdout
    assert "  | " not in p.stderr, p.stderr  # nothing built: no log
    p = cli("builds", "ls", env=env)
    for ref, sha in (("good", shas[0]), ("main", shas[2])):  # the second build: one hit
        assert re.search(rf"\| ref \| {ref} \| {sha[:12]} \|.* \| 1 \| complete \|",
                         p.stdout), p.stdout
    # the branch moves after the run: the stored run keeps its commit
    results = tmp_path / "results"
    p = cli("run", arms, "--results", results, "--plain", env=env)
    assert p.returncode == 0, p.stderr
    assert f"pr {shas[2][:7]}" in p.stdout  # default label: name sha7
    run = only_run(results)
    meta = json.loads((run / "run.json").read_text())
    pr = next(a for a in meta["arms"] if a["name"] == "pr")
    assert pr["commit"] == shas[2] and pr["git"]["sha"] == shas[2]
    assert (run / "logs" / "build-pr.log").is_file()
    # slower commit is slower
    rec = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    rates: dict[str, list[float]] = {}
    for r in rec:
        if r.get("type") == "sample" and "decode_tok_s" in r.get("metrics", {}):
            rates.setdefault(r["arm"], []).append(r["metrics"]["decode_tok_s"])
    assert min(rates["base"]) > max(rates["pr"]), rates


def _fails(p: subprocess.CompletedProcess[str], *said: str) -> str:
    """Exit 2 with ``Error: <where>: <what>`` and a hint, never a traceback."""
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Error: " in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "\nhint: " in p.stderr, p.stderr
    for text in said:
        assert text in p.stderr, (text, p.stderr)
    return p.stderr


def _nothing_measured(results: Path) -> None:
    assert not results.exists() or not list(results.iterdir())


def test_errors(tmp_path: Path, env: dict[str, str]) -> None:
    """Issue 14's errors users meet: unknown ref, failed build, missing artifact."""
    rate_repo(tmp_path / "repo", [400, 100])
    arms = git_arms(tmp_path / "arms.yaml", tmp_path / "repo",
                    {"base": {"ref": "good"}, "pr": {"ref": "no-such-branch"}})
    _fails(cli("validate", arms, env=env), f"{arms}: arm pr.git",
           "unknown ref 'no-such-branch'", "refs there: bad, good, main")
    arms = git_arms(tmp_path / "arms.yaml", tmp_path / "repo",
                    {"base": {"ref": "good"}, "pr": {"ref": "main"}})
    good = arms.read_text()
    arms.write_text(good.replace("cp {src}", "echo compiling; exit 3; cp {src}"))
    results = tmp_path / "results"
    err = _fails(cli("run", arms, "--results", results, "--plain", env=env),
                 f"{arms}: arm base.git", "step 1/1 exited with status 3",
                 "last lines of the build log", "compiling", "hint: read the whole log")
    assert "build.log" in err.split("last lines of the build log", 1)[1].splitlines()[0]
    _nothing_measured(results)
    # the build succeeds but makes no artifact where the source says
    arms.write_text(good.replace("artifacts:\n    - serve", "artifacts:\n    - bin/serve"))
    _fails(cli("run", arms, "--results", results, "--plain", env=env),
           f"{arms}: arm base.git", "did not make the artifact(s) serve (bin/serve)",
           "hint: fix the path in sources.ref.artifacts", "build.log")
    _nothing_measured(results)


def test_dirty_repo_and_dirty_mirror(tmp_path: Path, env: dict[str, str]) -> None:
    """HEAD with uncommitted changes; a cache mirror that is not a mirror of the repo, or
    holds a lock a killed git left: exit 2, what to remove."""
    repo = tmp_path / "repo"
    rate_repo(repo, [400, 100])
    (repo / "rate").write_text("1\n")
    arms = git_arms(tmp_path / "arms.yaml", repo, {"base": {"ref": "good"}, "pr": {"ref": "HEAD"}})
    _fails(cli("validate", arms, env=env), f"{arms}: arm pr.git",
           "uncommitted changes (rate)", "commit (or stash) them")
    arms = git_arms(tmp_path / "arms.yaml", repo, {"base": {"ref": "good"}, "pr": {"ref": "main"}})
    assert cli("validate", arms, env=env).returncode == 0  # a ref builds what is committed
    (mirror,) = (tmp_path / "cache" / "git").glob("*.git")
    git(repo, "commit", "-q", "-am", "c2: rate 1")  # something new to fetch
    lock = mirror / "refs" / "heads" / "main.lock"
    lock.write_text("")
    _fails(cli("validate", arms, env=env), f"{arms}: sources.ref.repo (for arm base)",
           f"cannot fetch from {repo}", "main.lock': File exists",
           "remove the .lock file(s) named above", f"or the whole mirror {mirror}")
    lock.unlink()
    git(mirror, "config", "remote.origin.url", str(tmp_path / "elsewhere"))
    _fails(cli("build", arms, env=env), f"the cached mirror {mirror} mirrors",
           f"hint: remove {mirror}")


def test_no_network_for_a_url_repo(tmp_path: Path, env: dict[str, str]) -> None:
    """A URL that cannot be fetched (no such host, no such path, no answer): exit 2,
    naming sources.NAME.repo and suggesting a local mirror."""
    with socket.socket() as hang:  # accepts, never answers
        hang.bind(("127.0.0.1", 0))
        hang.listen(4)
        for url, said in [("https://example.invalid/x.git", "Could not resolve host"),
                          (f"file://{tmp_path}/missing.git", "does not appear to be a git"),
                          (f"git://127.0.0.1:{hang.getsockname()[1]}/x.git",
                           "no answer within 2 s (ABBENCH_GIT_TIMEOUT)")]:
            arms = git_arms(tmp_path / "arms.yaml", url,
                            {"base": {"ref": "good"}, "pr": {"ref": "main"}})
            for command in ("validate", "build")[:2 if "invalid" in url else 1]:
                _fails(cli(command, arms, env={**env, "ABBENCH_GIT_TIMEOUT": "2"}),
                       f"{arms}: sources.ref.repo (for arm base)", f"cannot clone {url}",
                       said, f"git clone --mirror {url} DIR",
                       "set sources.ref.repo to DIR")
    assert not list((tmp_path / "cache" / "git").glob("*.git"))  # no half-made mirror


def test_leave_one_out_conflict_and_variants(tmp_path: Path, env: dict[str, str]) -> None:
    shas = rate_repo(tmp_path / "repo", [400, 400, 100, 100])
    # c2 changes the rate, c3 touches only NOTES: c1's NOTES change conflicts with c3's
    arms = git_arms(tmp_path / "arms.yaml", tmp_path / "repo",
                    {"base": {"ref": "good"}, "pr": {"ref": "main"}},
                    variants={"leave_one_out": {"arm": "pr", "commits": [shas[1]]}})
    p = cli("validate", arms, env=env)
    assert p.returncode == 2 and "conflicts in NOTES" in p.stderr, p.stderr
    (tmp_path / "repo" / "extra").write_text("x\n")
    git(tmp_path / "repo", "add", "extra")
    git(tmp_path / "repo", "commit", "-q", "-m", "extra file")
    arms = git_arms(tmp_path / "arms.yaml", tmp_path / "repo",
                    {"base": {"ref": "good"}, "pr": {"ref": "main"}},
                    variants={"leave_one_out": {"arm": "pr", "commits": ["main"]}})
    p = cli("validate", arms, env=env)
    assert p.returncode == 0, p.stderr
    assert "pr-no-main" in p.stdout
