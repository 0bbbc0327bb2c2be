"""Builds of server arms from git refs, cached per commit, patch set and recipe.

An arm can name a *source* (a git repository and a build recipe) and a *ref* in it
(a branch, tag or commit, plus commits to revert or cherry-pick on top) instead of a
ready binary. :func:`ensure_built` turns that into artifacts on disk, building once
per key and reusing the result afterwards::

    llama = Source(
        name="llama.cpp", repo="/src/llama.cpp",
        steps=[["cmake", "-S", "{src}", "-B", "{build}",
                "-DCMAKE_CXX_COMPILER_LAUNCHER={ccache}", "-DBUILD_SHARED_LIBS=OFF"],
               ["cmake", "--build", "{build}", "--target", "llama-server", "-j", "{jobs}"]],
        artifacts=["bin/llama-server"])
    built = ensure_built(GitRef("llama.cpp", "master", revert=("abc1234",)), llama)
    built.artifacts["llama-server"]     # Path of the binary

The cache's layout: :mod:`abbench.server.buildcache`.

Decisions, for the record:

* **Build key** = sha256 of: the commit, the patch set's commits in order, the recipe
  (the steps as written, placeholders unexpanded; the artifact paths; the source's
  ``env``) and a toolchain digest (:func:`toolchain_digest`: machine, the first line
  of ``cc``/``c++``/``cmake --version`` and of ``$CC``/``$CXX --version``, ``nvcc``'s
  path and version when present, and CC, CXX, CFLAGS, CXXFLAGS, CPPFLAGS, LDFLAGS,
  CUDA_HOME, CUDA_PATH, CUDACXX, CMAKE_GENERATOR plus the source's ``key_env``).
  ``{jobs}``, ``{ccache}`` and the cache's location are not in it: they do not change
  what is built. The CPU is not in it either: a ``-march=native`` build in a cache
  shared by different machines is the user's business.
* **Built in place, not renamed.** The entry is built at its final path, under its
  lock, and is complete only once ``.complete`` exists (written last, atomically). A
  dir without the marker (a failed or killed build) is never used: the next build of
  that key wipes it and starts again, and :func:`gc` removes it. Building in a temp
  folder and renaming it would break every build tree that records its own absolute
  path: CMake's build-tree RPATH (llama.cpp builds shared libraries by default, and a
  renamed ``llama-server`` would not find ``libllama.so``), ``CMakeCache.txt``, editable
  Python installs.
* **ccache.** When ``ccache`` is on PATH (and ``ABBENCH_CCACHE`` is not ``0``), the build
  environment gets ``CCACHE_DIR`` (the user's own when set, else ``<cache>/ccache``),
  ``CCACHE_BASEDIR=<cache>`` (the parent of the worktrees and of every build tree) and
  ``CCACHE_NOHASHDIR=1``, and the ``{ccache}`` placeholder expands to ``ccache`` (else to
  nothing; an argv item that is exactly ``{ccache}`` is then dropped). Using it is the
  recipe's business (``-DCMAKE_C_COMPILER_LAUNCHER={ccache}``).
* **One worktree path per source while building, then kept with the entry.** Each
  build gets a fresh ``git worktree`` of its patch set, always at ``<cache>/src/<source>``
  (builds of one source take turns). A fixed path is what lets two commits share
  compiled objects: ccache makes the paths on a compiler's command line relative, but
  not the paths written *inside* generated files, such as CMake's unity-build sources
  (``#include "/abs/src/x.cpp"``, which llama.cpp's libllama uses). With a worktree per
  entry, every unity chunk would miss. After a successful build the worktree (as the
  build left it) is moved into the entry (``git worktree move`` to ``<entry>/src``), so
  the ``{src}`` an arm's ``start`` gets (a file of the source tree, a Python server run
  from source) exists as long as the entry does; :func:`gc` removes it with the entry
  and prunes the mirror's worktree records. A failed build's worktree stays at the
  fixed path, for inspection, until the next build. An entry made before source trees
  were kept gets a fresh checkout of its patch set on its next use (files its steps
  wrote into the source tree are then absent). Artifacts that record the fixed path
  (an editable Python install) break at the next build of that source: install into
  ``{build}`` instead.
* **Steps** run in ``{build}`` with the environment plus the source's ``env``,
  ``ABBENCH_SRC``, ``ABBENCH_BUILD`` and ``ABBENCH_JOBS``. An argv list has the
  placeholders ``{src}``, ``{build}``, ``{jobs}``, ``{ccache}`` replaced in each item; a
  string runs with ``/bin/sh -c`` after the same replacement (paths shell-quoted).
  Other braces are left alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abbench.errors import ConfigError
from abbench.server.follow import follow
from abbench.server.git import (
    BuildError,
    GitRef,
    Mirror,
    Source,
    Step,
    _flock,
    _git,
    _last_lines,
    cache_root,
)

KEY_ENV = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CUDA_HOME", "CUDA_PATH",
           "CUDACXX", "CMAKE_GENERATOR")
MARKER = ".complete"
KEY_VERSION = 1
LOG_TAIL_LINES = 20


# ---------------------------------------------------------------------------------------
# Toolchain digest and build key

_TOOL_CACHE: dict[tuple[str, str], str] = {}
_TOOL_LOCK = threading.Lock()


def _tool_line(cmd: str, env: Mapping[str, str], *, last: bool = False) -> str | None:
    """``<realpath>: <first (or last) line of cmd --version>``, None when absent."""
    words = shlex.split(cmd)
    if not words:
        return None
    exe = shutil.which(words[0], path=env.get("PATH"))
    if exe is None:
        return None
    real = os.path.realpath(exe)
    try:
        stamp = str(os.stat(real).st_mtime_ns)
    except OSError:
        stamp = ""
    memo = (f"{cmd}\0{real}\0{stamp}\0{int(last)}", env.get("PATH", ""))
    with _TOOL_LOCK:
        if memo in _TOOL_CACHE:
            return _TOOL_CACHE[memo]
    try:
        proc = subprocess.run([exe, *words[1:], "--version"], capture_output=True, text=True,
                              env=dict(env), stdin=subprocess.DEVNULL, timeout=30)
        lines = [line.strip() for line in (proc.stdout or proc.stderr).splitlines()
                 if line.strip()]
        version = (lines[-1] if last else lines[0]) if lines else f"exit {proc.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:
        version = f"error: {e}"
    line = f"{real}: {version}"
    with _TOOL_LOCK:
        _TOOL_CACHE[memo] = line
    return line


def toolchain_digest(env: Mapping[str, str] | None = None,
                     key_env: Sequence[str] = ()) -> dict[str, Any]:
    """What of the toolchain goes into the build key (see the module's docstring)."""
    env = dict(os.environ if env is None else env)
    tools: dict[str, str | None] = {name: _tool_line(name, env) for name in ("cc", "c++", "cmake")}
    for var in ("CC", "CXX", "CUDACXX"):
        if env.get(var):
            tools[f"${var}"] = _tool_line(env[var], env)
    nvcc = _tool_line("nvcc", env, last=True)
    if nvcc is None and env.get("CUDA_HOME"):
        cand = Path(env["CUDA_HOME"]) / "bin" / "nvcc"
        nvcc = _tool_line(str(cand), env, last=True) if cand.exists() else None
    if nvcc is not None:
        tools["nvcc"] = nvcc
    names = sorted(set(KEY_ENV) | set(key_env))
    return {"machine": platform.machine(), "system": platform.system(),
            "tools": {k: v for k, v in tools.items() if v is not None},
            "env": {name: env[name] for name in names if name in env}}


def _build_env(source: Source) -> dict[str, str]:
    env = dict(os.environ)
    env.update(source.env)
    return env


def _ccache(env: Mapping[str, str]) -> str | None:
    if env.get("ABBENCH_CCACHE", "1").strip().lower() in ("0", "no", "off", "false"):
        return None
    return shutil.which("ccache", path=env.get("PATH"))


@dataclass(frozen=True)
class BuildPlan:
    """What :func:`ensure_built` will build (or find): resolved ids, key, entry."""

    gitref: GitRef
    source: Source
    sha: str
    patch: tuple[tuple[str, str], ...]
    key: str
    inputs: dict[str, Any]
    dir: Path

    @property
    def log(self) -> Path:
        return self.dir / "build.log"


def plan_build(gitref: GitRef, source: Source, cache: Path | str | None = None, *,
               fetch: bool = True) -> BuildPlan:
    """Resolve ``gitref`` in ``source`` and compute its build key and entry folder;
    builds nothing."""
    if gitref.source != source.name:
        raise ConfigError(f"the ref names source {gitref.source!r} but the source given is "
                          f"{source.name!r}", where=f"ref {gitref.ref!r}",
                          hint="pass the Source the GitRef names")
    root = cache_root(cache)
    mirror = Mirror(source, root)
    sha = mirror.resolve(gitref.ref, fetch=fetch)
    patch: list[tuple[str, str]] = []
    for op, refs in (("revert", gitref.revert), ("cherry-pick", gitref.cherry_pick)):
        for ref in refs:
            patch.append((op, mirror.resolve(ref, what=op, fetch=fetch)))
    env = _build_env(source)
    inputs: dict[str, Any] = {
        "version": KEY_VERSION, "sha": sha, "patch": [list(p) for p in patch],
        "recipe": source.recipe(), "toolchain": toolchain_digest(env, source.key_env)}
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":"))
                         .encode()).hexdigest()
    entry = root / "builds" / f"{source.name}-{sha[:12]}-{key[:12]}"
    return BuildPlan(gitref, source, sha, tuple(patch), key, inputs, entry)


# ---------------------------------------------------------------------------------------
# Building


@dataclass(frozen=True)
class BuiltArm:
    """A finished build: where its artifacts are and whether it came from the cache.
    ``seconds``: wall time of :func:`ensure_built` (waiting for another builder's lock
    included)."""

    source: str
    ref: str
    sha: str
    patch: tuple[tuple[str, str], ...]
    dir: Path
    artifacts: dict[str, Path]
    log: Path
    cached: bool
    seconds: float
    key: str
    tree: str

    @property
    def build_dir(self) -> Path:
        return self.dir / "build"

    @property
    def src_dir(self) -> Path:
        """``{src}`` of the arms: the source tree the build ran in, kept with the entry."""
        return self.dir / "src"

    @property
    def label(self) -> str:
        """e.g. ``master c443657a -1a2b3c4d +5e6f7a8b``: for a column head."""
        marks = {"revert": "-", "cherry-pick": "+"}
        return " ".join([self.ref, self.sha[:8], *(marks[op] + s[:8] for op, s in self.patch)])


def ensure_built(gitref: GitRef, source: Source, *, cache: Path | str | None = None,
                 jobs: int | None = None, fetch: bool = True,
                 timeout: float | None = None,
                 echo: Callable[[str], None] | None = None) -> BuiltArm:
    """The build of ``gitref`` with ``source``'s recipe: from the cache when its key was
    built before, else built now (one builder per key across processes and threads;
    others wait for it and get the cached result). ``jobs`` fills ``{jobs}`` (default
    ``$ABBENCH_JOBS`` or the number of CPUs); ``timeout`` bounds each step, in seconds;
    ``echo`` gets each line of the build log as it is written."""
    t0 = time.monotonic()
    plan = plan_build(gitref, source, cache, fetch=fetch)
    where = f"source {source.name!r}, ref {gitref.describe()!r}"
    lock = plan.dir.parent / ".locks" / f"{plan.dir.name}.lock"
    with _flock(lock):
        marker = _read_marker(plan.dir)
        cached = bool(marker and marker.get("key") == plan.key
                      and _artifacts_present(plan.dir, source))
        if not cached:
            with follow(plan.log, echo):
                marker = _build(plan, where, jobs=jobs, timeout=timeout)
        elif not (plan.dir / "src").is_dir():  # an entry older than kept source trees
            assert marker is not None
            _restore_src(plan, marker, where)
        assert marker is not None
        _touch(plan.dir / "last_used")
        if cached:
            _count_hit(plan.dir)
    artifacts = {name: plan.dir / "build" / rel for name, rel in source.artifact_paths.items()}
    return BuiltArm(source=source.name, ref=gitref.named or gitref.ref, sha=plan.sha,
                    patch=plan.patch, dir=plan.dir, artifacts=artifacts, log=plan.log,
                    cached=cached, seconds=time.monotonic() - t0, key=plan.key,
                    tree=str(marker.get("tree")))


def _artifacts_present(entry: Path, source: Source) -> bool:
    return all((entry / "build" / rel).exists() for rel in source.artifact_paths.values())


def _read_marker(entry: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((entry / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.touch()


def _hits(entry: Path) -> int:
    try:
        return int((entry / "hits").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _count_hit(entry: Path) -> None:
    """One more use from the cache (the caller holds the entry's lock)."""
    with contextlib.suppress(OSError):
        (entry / "hits").write_text(f"{_hits(entry) + 1}\n")


def _write_marker(entry: Path, marker: Mapping[str, Any]) -> None:
    """``<entry>/.complete``, atomically."""
    tmp = entry / f"{MARKER}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(marker, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, entry / MARKER)


def _restore_src(plan: BuildPlan, marker: dict[str, Any], where: str) -> None:
    """A fresh worktree of ``plan``'s patch set at ``<entry>/src``, and the marker's size
    updated (the caller holds the entry's lock)."""
    mirror = Mirror(plan.source, plan.dir.parent.parent)
    _prepare_src(mirror, plan, plan.dir / "src", where, keep_entry=True)
    with open(plan.log, "a", encoding="utf-8") as out:
        out.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: src/ checked out again "
                  "(the entry had no source tree)\n")
    marker["size_bytes"] = _du(plan.dir)
    _write_marker(plan.dir, marker)


def _keep_src(src: Path, mirror: Mirror, entry: Path, where: str) -> None:
    """Move the worktree the build ran in from ``src`` to ``<entry>/src``."""
    with mirror.lock():
        _git(["worktree", "move", str(src), str(entry / "src")], git_dir=mirror.path,
             where=where, hint=f"remove {entry} and build again")


def _remove_worktree(src: Path, mirror: Mirror) -> None:
    """Remove a worktree folder and its record in the mirror."""
    if src.exists() or src.is_symlink():
        if src.is_dir() and not src.is_symlink():
            shutil.rmtree(src)
        else:
            src.unlink()
    if mirror.exists():
        with mirror.lock():
            _git(["worktree", "prune"], git_dir=mirror.path, check=False)


def _build(plan: BuildPlan, where: str, *, jobs: int | None,
           timeout: float | None) -> dict[str, Any]:
    """Build ``plan`` into its entry folder (the caller holds the entry's lock)."""
    source, entry = plan.source, plan.dir
    root = entry.parent.parent
    mirror = Mirror(source, root)
    if entry.exists():
        shutil.rmtree(entry)
    entry.mkdir(parents=True)
    src, build, log = root / "src" / source.name, entry / "build", plan.log
    t0 = time.time()
    with open(log, "a", encoding="utf-8", errors="replace") as out:
        out.write(f"# abbench build of {source.name} {plan.gitref.describe()} ({source.repo})\n"
                  f"# commit {plan.sha}\n"
                  + "".join(f"# {op} {sha}\n" for op, sha in plan.patch)
                  + f"# key {plan.key}\n# entry {entry}\n")
        out.flush()
        # One build of a source at a time: its worktree has one fixed path (ccache).
        with _flock(src.with_name(f"{source.name}.lock")):
            tree = _prepare_src(mirror, plan, src, where)
            build.mkdir()
            env = _build_env(source)
            ccache = _ccache(env)
            njobs = jobs or int(env.get("ABBENCH_JOBS") or 0) or os.cpu_count() or 1
            if ccache:
                env.setdefault("CCACHE_DIR", str(root / "ccache"))
                env["CCACHE_BASEDIR"] = str(root)
                env["CCACHE_NOHASHDIR"] = "1"
            env.update({"ABBENCH_SRC": str(src), "ABBENCH_BUILD": str(build),
                        "ABBENCH_JOBS": str(njobs)})
            values = {"{src}": str(src), "{build}": str(build), "{jobs}": str(njobs),
                      "{ccache}": "ccache" if ccache else ""}
            out.write(f"# src {src}\n# tree {tree}\n# jobs {njobs}; ccache "
                      + (f"{ccache} (CCACHE_DIR={env['CCACHE_DIR']}, "
                         f"CCACHE_BASEDIR={env['CCACHE_BASEDIR']})" if ccache else "not used")
                      + "\n")
            out.flush()
            for i, step in enumerate(source.steps, 1):
                _run_step(i, step, values, env, build, out, plan, where, timeout)
            missing = [name for name, rel in source.artifact_paths.items()
                       if not (build / rel).exists()]
            if missing:
                rels = ", ".join(f"{n} ({source.artifact_paths[n]})" for n in missing)
                out.flush()
                raise BuildError(
                    f"the build succeeded but did not make the artifact(s) {rels} in {build}",
                    where=where, log_tail=_log_tail(log), log_path=log,
                    hint=f"fix the path in sources.{source.name}.artifacts (relative to "
                         f"{{build}}) or the step that should make it; the log: {log}")
            _keep_src(src, mirror, entry, where)
    if source.prune:
        _prune(build, set(source.artifact_paths.values()))
    duration = time.time() - t0
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"# built in {duration:.1f} s\n")
    marker: dict[str, Any] = {
        "source": source.name, "repo": source.repo, "ref": plan.gitref.describe(),
        "sha": plan.sha, "patch": [list(p) for p in plan.patch], "tree": tree, "key": plan.key,
        "inputs": plan.inputs, "created": time.time(),
        "created_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "duration_s": round(duration, 3),
        "artifacts": {name: {"path": rel, "size": _du(build / rel)}
                      for name, rel in source.artifact_paths.items()},
    }
    marker["size_bytes"] = _du(entry)
    _write_marker(entry, marker)
    return marker


def _prepare_src(mirror: Mirror, plan: BuildPlan, src: Path, where: str, *,
                 keep_entry: bool = False) -> str:
    """A fresh worktree at ``src``, detached at the commit, patches applied; returns its
    tree id. The caller holds the lock of ``src``'s folder (the source's or the entry's).
    A patch that fails removes the worktree, and the entry unless ``keep_entry``."""
    _remove_worktree(src, mirror)  # a failed build's, kept for inspection until now
    src.parent.mkdir(parents=True, exist_ok=True)
    with mirror.lock():
        _git(["worktree", "add", "--detach", "--quiet", str(src), plan.sha],
             git_dir=mirror.path, where=where,
             hint=f"remove {src} and try again; if it persists, remove the mirror "
                  f"{mirror.path}")
    for op, sha in plan.patch:
        subject, parents = mirror.commit_info(sha)
        args = [op, *(["-m", "1"] if parents > 1 else []),
                *(["--no-edit"] if op == "revert" else []), sha]
        proc = _git(args, cwd=src, check=False, where=where)
        if proc.returncode == 0:
            continue
        conflicts = _git(["diff", "--name-only", "--diff-filter=U"], cwd=src,
                         check=False).stdout.split()
        changed = _git(["status", "--porcelain", "--untracked-files=no"], cwd=src,
                       check=False).stdout.strip()
        _git([op, "--abort"], cwd=src, check=False)
        what = f"{op} of {sha[:12]} ({subject!r})"
        base = f"{plan.gitref.ref} ({plan.sha[:12]})"
        if conflicts:
            shown = ", ".join(conflicts[:10]) + (f" and {len(conflicts) - 10} more"
                                                if len(conflicts) > 10 else "")
            message = f"{what} does not apply cleanly on {base}: conflicts in {shown}"
        elif not changed:
            state = "absent from" if op == "revert" else "already in"
            message = (f"{what} changes nothing on {base}: its changes are {state} the "
                       f"tree there")
        else:
            message = (f"{what} failed on {base}: "
                       f"{_last_lines(proc.stderr + proc.stdout, 4)}")
        _remove_worktree(src, mirror)
        if not keep_entry:
            shutil.rmtree(plan.dir, ignore_errors=True)
        raise BuildError(
            message, where=where,
            hint=f"drop it from {op}, change the order of the patches, or resolve the "
                 f"conflict on a branch of {plan.source.repo} and build that branch")
    return _git(["rev-parse", "HEAD^{tree}"], cwd=src, where=where).stdout.strip()


def _substitute(step: Step, values: Mapping[str, str]) -> list[str]:
    if isinstance(step, str):
        text = step
        for ph, value in values.items():
            text = text.replace(ph, shlex.quote(value) if value else "")
        return ["/bin/sh", "-c", text]
    argv: list[str] = []
    for item in step:
        if item == "{ccache}" and not values["{ccache}"]:
            continue
        for ph, value in values.items():
            item = item.replace(ph, value)
        argv.append(item)
    return argv


def _run_step(i: int, step: Step, values: Mapping[str, str], env: Mapping[str, str],
              build: Path, out: Any, plan: BuildPlan, where: str,
              timeout: float | None) -> None:
    argv = _substitute(step, values)
    shown = argv[2] if isinstance(step, str) else shlex.join(argv)
    n = len(plan.source.steps)
    out.write(f"\n$ {shown}    # step {i}/{n}\n")
    out.flush()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=build, env=dict(env), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError as e:
        out.write(f"# cannot run: {e}\n")
        out.flush()
        raise BuildError(f"step {i}/{n} cannot run: {e.strerror}: {argv[0]}", where=where,
                         log_path=plan.log,
                         hint="install the program or fix the step's first word") from e
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out.write(f"# killed after {timeout} s\n")
        out.flush()
        raise BuildError(f"step {i}/{n} ran over its {timeout:.0f} s timeout: {shown}",
                         where=where, log_tail=_log_tail(plan.log), log_path=plan.log,
                         hint="raise the timeout, or look at the log for a hung step") from None
    except BaseException:
        _kill_group(proc)
        raise
    seconds = time.monotonic() - t0
    out.write(f"# step {i}/{n}: exit {rc} after {seconds:.1f} s\n")
    out.flush()
    if rc != 0:
        raise BuildError(
            f"build of {plan.source.name} {plan.gitref.describe()} ({plan.sha[:12]}) failed: "
            f"step {i}/{n} exited with status {rc}: {shown}", where=where,
            log_tail=_log_tail(plan.log), log_path=plan.log,
            hint=f"read the whole log at {plan.log} (the worktree it built from stays at "
                 f"{values['{src}']} until the next build of {plan.source.name}); fix the "
                 f"recipe or the commit and run again: the failed entry is rebuilt from "
                 f"scratch, and `abbench builds gc` removes it")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def _log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _prune(build: Path, keep: set[str]) -> None:
    """Delete everything under ``build`` but the ``keep`` paths (and their parents)."""
    parents = {"/".join(k.split("/")[:i]) for k in keep for i in range(1, k.count("/") + 1)}
    for root, dirs, files in os.walk(build, topdown=True):
        rel_root = os.path.relpath(root, build)
        rel_root = "" if rel_root == "." else rel_root + "/"
        for d in list(dirs):
            rel = rel_root + d
            if rel in keep:
                dirs.remove(d)
            elif rel not in parents:
                path = os.path.join(root, d)
                if os.path.islink(path):
                    os.unlink(path)
                else:
                    shutil.rmtree(path)
                dirs.remove(d)
        for name in files:
            if rel_root + name not in keep:
                os.unlink(os.path.join(root, name))


def _du(path: Path) -> int:
    """Bytes of the regular files under ``path`` (or of ``path`` itself)."""
    try:
        st = path.lstat()
    except OSError:
        return 0
    if not path.is_dir() or path.is_symlink():
        return st.st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total
