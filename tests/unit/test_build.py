"""Builds from git refs (abbench.server.build) on a tiny repository made in tmp_path,
whose "build" is a shell script that writes one artifact: each test runs in a second."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from abbench.errors import ConfigError
from abbench.report.builds import render_builds
from abbench.server.build import ensure_built, plan_build
from abbench.server.buildcache import gc, list_builds
from abbench.server.git import BuildError, GitRef, Mirror, Source, resolve

BUILD_SH = """#!/bin/sh
# $1 = build dir, $2 = src dir: the artifact holds VERSION and the feature flag
set -e
mkdir -p "$1/bin"
{ cat "$2/VERSION"; [ ! -f "$2/FEATURE" ] || echo feature; [ ! -f "$2/README" ] || echo readme; } \
  > "$1/bin/tool"
echo "built $(cat "$2/VERSION")"
"""


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args],
                          check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main: c1 (VERSION 1, build.sh) - c2 (README) - c3 (VERSION 2, tag v2) - c4 (VERSION 3,
    tag v3); branch feature off c4 adds FEATURE."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "build.sh").write_text(BUILD_SH)
    (r / "VERSION").write_text("1\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "c1 import")
    git(r, "tag", "v1")
    (r / "README").write_text("hello\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "c2 readme")
    git(r, "tag", "readme")
    (r / "VERSION").write_text("2\n")
    git(r, "commit", "-q", "-am", "c3 version 2")
    git(r, "tag", "v2")
    (r / "VERSION").write_text("3\n")
    git(r, "commit", "-q", "-am", "c4 version 3")
    git(r, "tag", "v3")
    git(r, "checkout", "-q", "-b", "feature")
    (r / "FEATURE").write_text("on\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "c5 feature")
    git(r, "checkout", "-q", "main")
    return r


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def tiny(repo: Path, *steps: object, artifacts: object = ("bin/tool",), **kw: object) -> Source:
    return Source(name="tiny", repo=str(repo),
                  steps=list(steps) or [["sh", "{src}/build.sh", "{build}", "{src}"]],
                  artifacts=artifacts, **kw)  # type: ignore[arg-type]


def test_resolve_refs(repo: Path, cache: Path) -> None:
    src = tiny(repo)
    v3 = git(repo, "rev-parse", "v3")
    assert resolve(src, "v3", cache) == v3
    assert resolve(src, "main", cache) == v3
    assert resolve(src, v3[:7], cache) == v3
    assert resolve(src, v3, cache, fetch=False) == v3
    assert resolve(src, "feature", cache) == git(repo, "rev-parse", "feature")
    assert resolve(src, "v2~1", cache) == git(repo, "rev-parse", "readme")
    assert resolve(src, "HEAD", cache) == v3
    # a new commit upstream is seen after the next fetch
    (repo / "NEW").write_text("x")
    git(repo, "add", "NEW")
    git(repo, "commit", "-q", "-m", "c6")
    assert resolve(src, "main", cache) == git(repo, "rev-parse", "main")


def test_unknown_ref_names_ref_source_closest_and_hint(repo: Path, cache: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        resolve(tiny(repo), "v22", cache)
    text = str(exc.value)
    assert "unknown ref 'v22' in source 'tiny'" in text
    assert str(repo) in text
    assert "closest refs: v2" in text
    assert "hint: name a branch, tag or commit" in text
    assert exc.value.exit_code == 2
    with pytest.raises(ConfigError, match="unknown revert 'nope'"):
        plan_build(GitRef("tiny", "v3", revert=("nope",)), tiny(repo), cache)


@pytest.mark.parametrize("ref", ["", ".", "worktree", "-x", "a b"])
def test_refs_that_are_not_commits(ref: str) -> None:
    with pytest.raises(ConfigError, match="ref"):
        GitRef("tiny", ref)


def test_build_then_cache_hit(repo: Path, cache: Path) -> None:
    src = tiny(repo)
    first = ensure_built(GitRef("tiny", "v3"), src, cache=cache)
    assert not first.cached
    assert first.sha == git(repo, "rev-parse", "v3")
    assert first.artifacts["tool"].read_text() == "3\nreadme\n"
    assert first.dir.name == f"tiny-{first.sha[:12]}-{first.key[:12]}"
    assert first.dir.parent == Path(os.path.realpath(cache)) / "builds"
    assert first.tree == git(repo, "rev-parse", "v3^{tree}")
    marker = json.loads((first.dir / ".complete").read_text())
    assert marker["sha"] == first.sha and marker["key"] == first.key
    assert marker["artifacts"]["tool"] == {"path": "bin/tool", "size": 9}
    assert not (Path(os.path.realpath(cache)) / "src" / "tiny").exists()  # moved to the entry
    assert set(marker["inputs"]) == {"version", "sha", "patch", "recipe", "toolchain"}
    assert "built 3" in first.log.read_text()
    used = (first.dir / "last_used").stat().st_mtime
    os.utime(first.dir / "last_used", (used - 100, used - 100))

    again = ensure_built(GitRef("tiny", "main"), src, cache=cache)  # same commit
    assert again.cached and again.dir == first.dir and again.key == first.key
    assert (first.dir / "last_used").stat().st_mtime > used - 50
    assert first.log.read_text().count("built 3") == 1
    assert [e.hits for e in list_builds(cache)] == [1]
    # a ref pinned to its commit id shows the name it was given
    pinned = ensure_built(GitRef("tiny", first.sha, named="main"), src, cache=cache)
    assert pinned.cached and pinned.ref == "main" and pinned.label.startswith("main ")
    assert [e.hits for e in list_builds(cache)] == [2]
    assert "| cache hits |" in render_builds(list_builds(cache))


def _worktrees(mirror: Mirror) -> list[str]:
    out = subprocess.run(["git", f"--git-dir={mirror.path}", "worktree", "list", "--porcelain"],
                         capture_output=True, text=True, check=True).stdout
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def test_src_is_kept_with_the_entry_until_gc(repo: Path, cache: Path) -> None:
    """{src} of an arm: the tree the build ran in (patches applied, files the steps wrote
    there included), valid after later builds of the same source, removed by gc."""
    src = tiny(repo, ["sh", "{src}/build.sh", "{build}", "{src}"], "echo made > {src}/GENERATED")
    v2 = ensure_built(GitRef("tiny", "v2"), src, cache=cache)
    picked = ensure_built(GitRef("tiny", "v3", cherry_pick=("feature",)), src, cache=cache)
    assert v2.src_dir == v2.dir / "src"
    assert (v2.src_dir / "VERSION").read_text() == "2\n"  # still there after the next build
    assert not (v2.src_dir / "FEATURE").exists()
    assert (picked.src_dir / "VERSION").read_text() == "3\n"
    assert (picked.src_dir / "FEATURE").read_text() == "on\n"
    assert (v2.src_dir / "GENERATED").read_text() == "made\n"
    mirror = Mirror(src, cache)
    assert {str(v2.src_dir), str(picked.src_dir)} <= set(_worktrees(mirror))
    marker = json.loads((v2.dir / ".complete").read_text())
    assert marker["size_bytes"] >= sum(p.stat().st_size for p in v2.src_dir.rglob("*")
                                       if p.is_file() and ".git" not in p.parts)
    assert ensure_built(GitRef("tiny", "v2"), src, cache=cache).src_dir == v2.src_dir

    # an entry made before source trees were kept gets its patch set checked out again
    subprocess.run(["git", f"--git-dir={mirror.path}", "worktree", "remove", "--force",
                    str(picked.src_dir)], check=True)
    again = ensure_built(GitRef("tiny", "v3", cherry_pick=("feature",)), src, cache=cache)
    assert again.cached and (again.src_dir / "FEATURE").read_text() == "on\n"
    assert "checked out again" in again.log.read_text()

    assert {e.path for e in gc(cache, max_bytes=0)} == {v2.dir, picked.dir}
    assert not v2.src_dir.exists() and not picked.src_dir.exists()
    assert _worktrees(mirror) == [str(mirror.path)]  # the mirror's records pruned too


def test_key_changes_with_the_recipe_not_with_jobs(repo: Path, cache: Path) -> None:
    ref = GitRef("tiny", "v3")
    a = plan_build(ref, tiny(repo), cache)
    assert plan_build(ref, tiny(repo), cache).key == a.key
    other = tiny(repo, ["sh", "{src}/build.sh", "{build}", "{src}"], "true")
    assert plan_build(ref, other, cache).key != a.key
    assert plan_build(ref, tiny(repo, env={"CFLAGS": "-O3"}), cache).key != a.key
    built = ensure_built(ref, tiny(repo), cache=cache, jobs=1)
    assert built.key == a.key
    assert ensure_built(ref, tiny(repo), cache=cache, jobs=7).cached
    changed = ensure_built(ref, other, cache=cache)
    assert not changed.cached and changed.dir != built.dir


def test_revert_and_cherry_pick_make_other_patch_sets(repo: Path, cache: Path) -> None:
    src = tiny(repo)
    plain = ensure_built(GitRef("tiny", "v3"), src, cache=cache)
    no_readme = ensure_built(GitRef("tiny", "v3", revert=("readme",)), src, cache=cache)
    assert no_readme.patch == (("revert", git(repo, "rev-parse", "readme")),)
    assert no_readme.key != plain.key and no_readme.dir != plain.dir
    assert no_readme.artifacts["tool"].read_text() == "3\n"
    assert no_readme.tree != plain.tree == git(repo, "rev-parse", "v3^{tree}")
    back = ensure_built(GitRef("tiny", "v3", revert=("v3",)), src, cache=cache)
    assert back.artifacts["tool"].read_text() == "2\nreadme\n"
    picked = ensure_built(GitRef("tiny", "v2", cherry_pick=("feature",)), src, cache=cache)
    assert picked.patch == (("cherry-pick", git(repo, "rev-parse", "feature")),)
    assert picked.artifacts["tool"].read_text() == "2\nfeature\nreadme\n"
    assert picked.label.startswith(f"v2 {picked.sha[:8]} +")
    both = GitRef("tiny", "v3", revert=("readme",), cherry_pick=("feature",))
    assert ensure_built(both, src, cache=cache).artifacts["tool"].read_text() == "3\nfeature\n"
    # the user's repository is untouched: same branch and HEAD, clean, no worktrees
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_conflicting_revert_names_commit_and_files(repo: Path, cache: Path) -> None:
    src = tiny(repo)
    c3 = git(repo, "rev-parse", "v2")
    with pytest.raises(BuildError) as exc:
        ensure_built(GitRef("tiny", "v3", revert=("v2",)), src, cache=cache)
    text = str(exc.value)
    assert f"revert of {c3[:12]} ('c3 version 2') does not apply cleanly" in text
    assert "conflicts in VERSION" in text
    assert "source 'tiny', ref 'v3 -v2'" in text
    assert "hint: drop it from revert" in text
    assert exc.value.exit_code == 2
    assert list_builds(cache) == []  # nothing half-made is left
    with pytest.raises(BuildError, match=r"changes nothing on v1 .*: its changes are absent"):
        ensure_built(GitRef("tiny", "v1", revert=("readme",)), src, cache=cache)
    with pytest.raises(BuildError, match=r"cherry-pick of .* changes nothing on v3 .*already"):
        ensure_built(GitRef("tiny", "v3", cherry_pick=("readme",)), src, cache=cache)
    mirror = Mirror(src, cache)
    worktrees = subprocess.run(["git", f"--git-dir={mirror.path}", "worktree", "list"],
                               capture_output=True, text=True, check=True).stdout
    assert len(worktrees.splitlines()) == 1


def test_failed_build_error_has_log_tail_and_path(repo: Path, cache: Path) -> None:
    src = tiny(repo, "for i in $(seq 1 50); do echo line $i; done; exit 3")
    with pytest.raises(BuildError) as exc:
        ensure_built(GitRef("tiny", "v3"), src, cache=cache)
    err = exc.value
    text = str(err)
    assert "step 1/1 exited with status 3" in text
    assert "line 50" in text and "line 35" in text and "line 20\n" not in text
    assert err.log_path is not None and err.log_path.name == "build.log"
    assert str(err.log_path) in text
    assert "hint: read the whole log" in text
    kept = Path(os.path.realpath(cache)) / "src" / "tiny"
    assert f"the worktree it built from stays at {kept}" in text
    assert (kept / "VERSION").read_text() == "3\n"
    assert err.exit_code == 2
    (entry,) = list_builds(cache)
    assert not entry.complete
    # the next attempt starts again from scratch (and fails the same way)
    with pytest.raises(BuildError):
        ensure_built(GitRef("tiny", "v3"), src, cache=cache)
    assert err.log_path.read_text().count("line 50") == 1


def test_missing_artifact_names_it_and_the_build_dir(repo: Path, cache: Path) -> None:
    src = tiny(repo, artifacts={"tool": "bin/tool", "server": "bin/server"})
    with pytest.raises(BuildError) as exc:
        ensure_built(GitRef("tiny", "v3"), src, cache=cache)
    text = str(exc.value)
    assert "did not make the artifact(s) server (bin/server)" in text
    assert "/build" in text and "tiny-" in text
    assert "hint: fix the path in sources.tiny.artifacts" in text and "build.log" in text


def test_two_threads_build_once(repo: Path, cache: Path, tmp_path: Path) -> None:
    count = tmp_path / "count"
    src = tiny(repo, ["sh", "{src}/build.sh", "{build}", "{src}"],
               f"echo x >> {count}; sleep 1")
    results: list[object] = []

    def one() -> None:
        try:
            results.append(ensure_built(GitRef("tiny", "v3"), src, cache=cache))
        except Exception as e:  # reported below
            results.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert count.read_text() == "x\n"
    cached = sorted(getattr(r, "cached", r) for r in results)  # type: ignore[arg-type]
    assert cached == [False, True]


def test_ccache_placeholder_and_environment(repo: Path, cache: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    step = ["sh", "-c", 'echo "$# $ABBENCH_JOBS ${CCACHE_BASEDIR:-none}" > {build}/args; '
            'sh {src}/build.sh {build} {src}', "zero", "{ccache}", "{jobs}"]
    monkeypatch.setenv("ABBENCH_CCACHE", "0")
    built = ensure_built(GitRef("tiny", "v3"), tiny(repo, step), cache=cache, jobs=3)
    assert (built.build_dir / "args").read_text() == "1 3 none\n"  # {ccache} item dropped
    assert "ccache not used" in built.log.read_text()


def test_head_of_a_dirty_local_repo_is_refused(repo: Path, cache: Path) -> None:
    (repo / "VERSION").write_text("dirty\n")
    with pytest.raises(ConfigError) as exc:
        ensure_built(GitRef("tiny", "HEAD"), tiny(repo), cache=cache)
    text = str(exc.value)
    assert "uncommitted changes (VERSION)" in text and "committed refs only" in text
    built = ensure_built(GitRef("tiny", "main"), tiny(repo), cache=cache)  # a ref: fine
    assert built.artifacts["tool"].read_text() == "3\nreadme\n"
    assert (repo / "VERSION").read_text() == "dirty\n"


def test_a_broken_mirror_is_a_clear_error(repo: Path, cache: Path) -> None:
    src = tiny(repo)
    mirror = Mirror(src, cache)
    mirror.path.mkdir(parents=True)
    (mirror.path / "junk").write_text("x")
    with pytest.raises(BuildError) as exc:
        resolve(src, "v3", cache)
    text = str(exc.value)
    assert str(mirror.path) in text and "is not a bare git repository" in text
    assert f"hint: remove {mirror.path}" in text


def test_list_gc_and_copy_log(repo: Path, cache: Path, tmp_path: Path) -> None:
    src = tiny(repo)
    old = ensure_built(GitRef("tiny", "v2"), src, cache=cache)
    new = ensure_built(GitRef("tiny", "v3"), src, cache=cache)
    with pytest.raises(BuildError):
        ensure_built(GitRef("tiny", "v1"), tiny(repo, "exit 1"), cache=cache)
    past = time.time() - 10 * 86400
    os.utime(old.dir / "last_used", (past, past))
    entries = list_builds(cache)
    assert [e.path for e in entries if e.complete] == [new.dir, old.dir]
    assert [e.complete for e in entries].count(False) == 1
    top = next(e for e in entries if e.complete)
    assert top.sha == new.sha and top.source == "tiny" and top.ref == "v3"
    assert next(e for e in entries if not e.complete).sha == git(repo, "rev-parse", "v1")[:12]
    assert all(e.size_bytes > 0 for e in entries)
    assert "| tiny | v3 |" in render_builds(entries)

    dry = gc(cache, keep_days=5, dry_run=True)
    assert {e.path for e in dry} == {old.dir} | {e.path for e in entries if not e.complete}
    assert old.dir.exists() and len(list_builds(cache)) == 3
    assert {e.path for e in gc(cache, keep_days=5)} == {e.path for e in dry}
    assert [e.path for e in list_builds(cache)] == [new.dir]
    assert not old.dir.exists()
    assert not (Path(os.path.realpath(cache)) / "src" / "tiny").exists()  # failed build's
    assert ensure_built(GitRef("tiny", "v3"), src, cache=cache).cached

    assert gc(cache, max_bytes=10**9) == []
    assert [e.path for e in gc(cache, max_bytes=0)] == [new.dir]
    assert list_builds(cache) == []
    # an entry that was removed is simply built again
    assert not ensure_built(GitRef("tiny", "v3"), src, cache=cache).cached


def test_bad_sources_are_config_errors(repo: Path) -> None:
    with pytest.raises(ConfigError, match="bad source name"):
        Source(name="a/b", repo=str(repo), steps=["true"], artifacts=["x"])
    with pytest.raises(ConfigError, match="not a path under"):
        tiny(repo, artifacts=["../x"])
    with pytest.raises(ConfigError, match="no artifacts"):
        tiny(repo, artifacts=[])
    with pytest.raises(ConfigError, match="step 1"):
        Source(name="t", repo=str(repo), steps=[[]], artifacts=["x"])
    assert tiny(repo, artifacts=["{build}/bin/tool"]).artifact_paths == {"tool": "bin/tool"}
    with pytest.raises(ConfigError, match="names source 'other'"):
        plan_build(GitRef("other", "v3"), tiny(repo))
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(Source(name="t", repo=str(repo) + "-gone", steps=["true"], artifacts=["x"]),
                "main", repo.parent / "cache")


def test_prune_keeps_only_the_artifacts(repo: Path, cache: Path) -> None:
    steps = [["sh", "{src}/build.sh", "{build}", "{src}"],
             "mkdir -p {build}/obj {build}/share/doc && touch {build}/obj/a.o "
             "{build}/CMakeCache.txt {build}/bin/extra {build}/share/doc/x"]
    src = tiny(repo, *steps, artifacts={"tool": "bin/tool", "doc": "share/doc"}, prune=True)
    built = ensure_built(GitRef("tiny", "v3"), src, cache=cache)
    files = sorted(str(p.relative_to(built.build_dir)) for p in built.build_dir.rglob("*"))
    assert files == ["bin", "bin/tool", "share", "share/doc", "share/doc/x"]
    assert built.artifacts["doc"].is_dir()
