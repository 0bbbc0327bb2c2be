"""Arms built from git refs (reference server): validate pins, build, run, cache, resume,
errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.faultkit import cli, only_run
from tests.gitkit import git, git_arms, rate_repo


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"ABBENCH_CACHE": str(tmp_path / "cache"), "ABBENCH_CCACHE": "0"}


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
    p = cli("build", arms, env=env)
    assert p.stdout.count("cache hit") == 2, p.stdout
    p = cli("builds", "ls", env=env)
    assert shas[0][:12] in p.stdout and shas[2][:12] in p.stdout and "complete" in p.stdout
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


def test_errors(tmp_path: Path, env: dict[str, str]) -> None:
    rate_repo(tmp_path / "repo", [400, 100])
    arms = git_arms(tmp_path / "arms.yaml", tmp_path / "repo",
                    {"base": {"ref": "good"}, "pr": {"ref": "no-such-branch"}})
    p = cli("validate", arms, env=env)
    assert p.returncode == 2 and "unknown ref 'no-such-branch'" in p.stderr, p.stderr
    arms = git_arms(tmp_path / "arms.yaml", tmp_path / "repo",
                    {"base": {"ref": "good"}, "pr": {"ref": "main"}})
    doc = arms.read_text().replace("cp {src}", "echo compiling; exit 3; cp {src}")
    arms.write_text(doc)
    p = cli("run", arms, "--results", tmp_path / "results", "--plain", env=env)
    assert p.returncode == 2, p.stderr
    assert "compiling" in p.stderr and "build.log" in p.stderr
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


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
