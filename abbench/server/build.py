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

Layout under the cache root (``$ABBENCH_CACHE``, default ``~/.cache/abbench``)::

    git/<source>-<hash of the repo>.git     bare mirror (git clone --mirror, then git fetch)
    git/<source>-<hash of the repo>.lock    flock for clone, fetch and worktree changes
    src/<source>/                           {src} of the steps: the git worktree of the
                                            build under way, detached at the commit,
                                            patches applied
    src/<source>.lock                       flock: one build of a source at a time
    builds/<source>-<sha12>-<key12>/        one entry per build key
        build/      {build}: where the steps run and the artifacts are
        src/        {src} of the arms: the worktree the build ran in, moved here after it
        build.log   every step's command, output, status and time
        last_used   touched each time the entry is used
        hits        how many times it was used from the cache (a number)
        .complete   JSON marker, written last: key inputs, created, duration, artifacts
    builds/.locks/<entry>.lock             flock per entry: one builder per key
    ccache/                                 CCACHE_DIR (unless the environment sets one)

Decisions, for the record:

* **Refs only.** A build is always of a commit: the user's working tree is never read
  or touched (a local repository is cloned into the mirror, which fetches from it).
  Uncommitted changes are never part of a build; asking for ``HEAD`` (or ``@``) of a
  local repository that has uncommitted changes to tracked files is an error, since
  that is where someone would expect them to be included.
* **Patch set.** Reverts are applied first, then cherry-picks, each in the order given
  (``git revert --no-edit`` / ``git cherry-pick``; a merge commit with ``-m 1``), with
  the committer ``abbench <abbench@localhost>``, hooks and signing off. A commit that
  does not apply cleanly is an error naming it and the conflicting files.
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
import difflib
import fcntl
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abbench.errors import AbbenchError, ConfigError, StoreError

__all__ = [
    "BuildEntry",
    "BuildError",
    "BuildPlan",
    "BuiltArm",
    "FetchError",
    "GitRef",
    "Mirror",
    "Source",
    "cache_root",
    "copy_build_log",
    "ensure_built",
    "gc",
    "list_builds",
    "plan_build",
    "render_builds",
    "resolve",
    "toolchain_digest",
]

Step = str | Sequence[str]

PLACEHOLDERS = ("{src}", "{build}", "{jobs}", "{ccache}")
KEY_ENV = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CUDA_HOME", "CUDA_PATH",
           "CUDACXX", "CMAKE_GENERATOR")
MARKER = ".complete"
KEY_VERSION = 1
LOG_TAIL_LINES = 20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_ENTRY = re.compile(r"^(?P<source>.+)-(?P<sha>[0-9a-f]{12})-(?P<key>[0-9a-f]{12})$")
#: for clone and fetch: an HTTP transfer slower than 1 KB/s for a minute ends
_REMOTE_CONFIG = ["-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60"]
_WORKING_TREE_WORDS = {"", ".", "working-tree", "working tree", "worktree"}
_IDENTITY = ["-c", "user.name=abbench", "-c", "user.email=abbench@localhost",
             "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null",
             "-c", "advice.detachedHead=false", "-c", "core.autocrlf=false"]


class FetchError(AbbenchError):
    """A source's repository could not be cloned or fetched (no network, a wrong URL or
    path, a lock left in the mirror). Exit code 2: nothing was built or measured."""

    exit_code = 2


class BuildError(AbbenchError):
    """A build from a git ref could not be made: git failed, a patch did not apply, a
    step failed, an artifact is missing. Exit code 2: nothing was measured."""

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None,
                 log_tail: str = "", log_path: Path | None = None):
        super().__init__(message, where=where, hint=hint)
        self.log_tail = log_tail
        self.log_path = log_path

    def __str__(self) -> str:
        text = super().__str__()
        if self.log_tail:
            tail = "\n".join("    " + line for line in self.log_tail.rstrip().splitlines())
            of = f" {self.log_path}" if self.log_path else ""
            text += f"\n  last lines of the build log{of}:\n{tail}"
        return text


# ---------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Source:
    """A repository and how to build it.

    ``repo``: a local path or a URL git can clone. ``steps``: argv lists or shell
    strings, run in order in ``{build}``. ``artifacts``: paths under ``{build}`` (a list,
    named by their last component, or a mapping name -> path). ``env``: extra build
    environment (part of the key). ``key_env``: names of further environment variables
    whose values go into the key. ``prune``: after a successful build keep only the
    artifacts under ``{build}`` (for self-contained artifacts such as a static binary:
    saves the object files' space).
    """

    name: str
    repo: str
    steps: Sequence[Step]
    artifacts: Sequence[str] | Mapping[str, str]
    env: Mapping[str, str] = field(default_factory=dict)
    key_env: Sequence[str] = ()
    prune: bool = False

    def __post_init__(self) -> None:
        where = f"source {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(f"bad source name {self.name!r}", where="source",
                              hint="use letters, digits and ._+- (it names cache folders)")
        if not isinstance(self.repo, str) or not self.repo.strip():
            raise ConfigError("the source has no repo", where=where,
                              hint="give a local path or a URL git can clone")
        if isinstance(self.steps, str) or not self.steps:
            raise ConfigError("steps must be a non-empty list of steps", where=where,
                              hint='e.g. [["cmake", "-S", "{src}", "-B", "{build}"], '
                                   '"make -C {build} -j{jobs}"]')
        steps: list[Step] = []
        for i, step in enumerate(self.steps, 1):
            if isinstance(step, str):
                if not step.strip():
                    raise ConfigError(f"step {i} is empty", where=where)
                steps.append(step)
            elif (isinstance(step, Sequence) and step
                  and all(isinstance(a, str) for a in step)):
                steps.append(tuple(step))
            else:
                raise ConfigError(f"step {i} is neither a shell string nor a list of strings: "
                                  f"{step!r}", where=where,
                                  hint="write an argv list of strings or one shell string")
        object.__setattr__(self, "steps", tuple(steps))
        if isinstance(self.artifacts, str):
            raise ConfigError("artifacts must be a list of paths or a mapping name -> path",
                              where=where, hint=f"write [{self.artifacts!r}]")
        raw = (dict(self.artifacts) if isinstance(self.artifacts, Mapping)
               else {_artifact_rel(p, where).rsplit("/", 1)[-1]: p for p in self.artifacts})
        if not raw:
            raise ConfigError("the source names no artifacts", where=where,
                              hint="list the paths under {build} the build makes, "
                                   "e.g. [bin/llama-server]")
        if not isinstance(self.artifacts, Mapping) and len(raw) != len(self.artifacts):
            raise ConfigError("two artifacts have the same last path component", where=where,
                              hint="name them with a mapping: {name: path}")
        object.__setattr__(self, "artifacts",
                           {str(k): _artifact_rel(v, where) for k, v in raw.items()})
        object.__setattr__(self, "env", {str(k): str(v) for k, v in dict(self.env).items()})
        object.__setattr__(self, "key_env", tuple(self.key_env))

    @property
    def artifact_paths(self) -> dict[str, str]:
        """Artifact name -> path relative to ``{build}``."""
        assert isinstance(self.artifacts, Mapping)
        return dict(self.artifacts)

    @property
    def local(self) -> bool:
        """True when ``repo`` is a path on this machine rather than a URL."""
        return _is_local(self.repo)

    @property
    def repo_id(self) -> str:
        """The repository as the mirror records it: an absolute path or the URL."""
        return str(Path(self.repo).expanduser().resolve()) if self.local else self.repo

    def recipe(self) -> dict[str, Any]:
        """What of the source goes into the build key."""
        return {"steps": [s if isinstance(s, str) else list(s) for s in self.steps],
                "artifacts": self.artifact_paths, "env": dict(self.env),
                "key_env": list(self.key_env)}


@dataclass(frozen=True)
class GitRef:
    """A ref of a source, with commits to revert and to cherry-pick on top (reverts
    first, then cherry-picks, each in the order given). Refs only: never a working tree.
    ``named``: how the user named it when ``ref`` is the commit id it was pinned to (an
    arms file's ``ref: main``): what logs, errors and ``builds ls`` show."""

    source: str
    ref: str
    revert: Sequence[str] = ()
    cherry_pick: Sequence[str] = ()
    named: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "revert", tuple(self.revert))
        object.__setattr__(self, "cherry_pick", tuple(self.cherry_pick))
        where = f"source {self.source!r}"
        for what, ref in [("ref", self.ref), *(("revert", r) for r in self.revert),
                          *(("cherry-pick", r) for r in self.cherry_pick)]:
            _check_ref_text(ref, what, where)

    def describe(self) -> str:
        """``ref`` (or ``named``) plus its patches, e.g. ``master -abc1234 +def5678``
        (full commit ids shortened to 12 digits)."""
        def short(r: str) -> str:
            return r[:12] if _SHA.match(r) else r
        parts = [self.named or short(self.ref), *(f"-{short(r)}" for r in self.revert),
                 *(f"+{short(c)}" for c in self.cherry_pick)]
        return " ".join(parts)


def _check_ref_text(ref: str, what: str, where: str) -> None:
    if not isinstance(ref, str) or ref.strip().lower() in _WORKING_TREE_WORDS:
        raise ConfigError(f"{what} {ref!r} does not name a commit", where=where,
                          hint="abbench builds committed refs only (a branch, tag or commit); "
                               "commit or stash your changes and name that commit")
    if ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref):
        raise ConfigError(f"{what} {ref!r} is not a valid git ref", where=where,
                          hint="name a branch, tag or commit id, without spaces or a leading -")


def _artifact_rel(path: str, where: str) -> str:
    text = str(path)
    for prefix in ("{build}/", "{build}"):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts or text.startswith("/") or ".." in parts or "{" in text:
        raise ConfigError(f"artifact {path!r} is not a path under {{build}}", where=where,
                          hint="write it relative to the build folder, e.g. bin/llama-server")
    return "/".join(parts)


def _is_local(repo: str) -> bool:
    if "://" in repo:
        return False
    # scp-like syntax: user@host:path or host:path (but not C:\ and not ./a:b)
    return not re.match(r"^[^/\\]+@[^/:]+:|^[A-Za-z0-9.-]{2,}:(?!//)", repo)


# ---------------------------------------------------------------------------------------
# Small helpers: cache root, locks, git


def cache_root(cache: Path | str | None = None) -> Path:
    """The cache root: ``cache``, else ``$ABBENCH_CACHE``, else ``~/.cache/abbench``,
    made absolute with symlinks resolved (ccache compares real paths)."""
    root = Path(cache if cache is not None else os.environ.get("ABBENCH_CACHE")
                or Path.home() / ".cache" / "abbench")
    root = Path(os.path.realpath(root.expanduser()))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the cache folder: {e.strerror}", where=str(root),
                         hint="set ABBENCH_CACHE to a writable folder") from e
    return root


@contextlib.contextmanager
def _flock(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """An exclusive flock on ``path``; yields False (not locked) when ``blocking`` is
    False and someone else holds it. Each call opens its own file, so two threads of
    one process exclude each other too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def _git_timeout() -> float:
    """``$ABBENCH_GIT_TIMEOUT`` (seconds a clone or fetch may take), default 1800."""
    text = os.environ.get("ABBENCH_GIT_TIMEOUT", "").strip()
    try:
        value = float(text) if text else 1800.0
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"ABBENCH_GIT_TIMEOUT={text!r} is not a number of seconds > 0",
                          where="environment", hint="e.g. ABBENCH_GIT_TIMEOUT=600")
    return value


def _git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # Never wait on a prompt: no password, no passphrase, no unknown host key question.
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_ASKPASS": "true"})
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes -o ConnectTimeout=30")
    # `git status` in the user's repository must not even refresh its index file.
    env["GIT_OPTIONAL_LOCKS"] = "0"
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(name, None)
    env.update(extra or {})
    return env


def _git(args: Sequence[str], *, git_dir: Path | None = None, cwd: Path | None = None,
         check: bool = True, where: str = "git", hint: str | None = None,
         timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["git", *_IDENTITY]
    if git_dir is not None:
        cmd.append(f"--git-dir={git_dir}")
    cmd.extend(args)
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=_git_env(), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout)
    except FileNotFoundError as e:
        raise BuildError("git is not installed", where=where,
                         hint="install git (apt-get install git)") from e
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"git {' '.join(args[:2])} took more than {timeout:.0f} s",
                         where=where, hint=hint or "check the network and the repo URL") from e
    if check and proc.returncode != 0:
        raise BuildError(f"git {' '.join(args)} failed (exit {proc.returncode}): "
                         f"{_last_lines(proc.stderr or proc.stdout, 6)}", where=where,
                         hint=hint)
    return proc


def _last_lines(text: str, n: int) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-n:]) if lines else "(no output)"


# ---------------------------------------------------------------------------------------
# Mirror


class Mirror:
    """The bare mirror of one source under ``<cache>/git``; made on first use, fetched
    at most once per instance (unless :meth:`update` is called with ``force``)."""

    def __init__(self, source: Source, cache: Path | str | None = None):
        self.source = source
        self.cache = cache_root(cache)
        digest = hashlib.sha256(source.repo_id.encode()).hexdigest()[:12]
        self.path = self.cache / "git" / f"{source.name}-{digest}.git"
        self.lock_path = self.path.with_suffix(".lock")
        self.fetched_at: float | None = None
        self._where = f"source {source.name!r} ({source.repo})"

    def lock(self) -> contextlib.AbstractContextManager[bool]:
        """The mirror's flock (clone, fetch and worktree changes)."""
        return _flock(self.lock_path)

    def exists(self) -> bool:
        return self.path.exists()

    def update(self, *, force: bool = False) -> None:
        """Clone the mirror if absent, else fetch (prunes refs gone upstream)."""
        if self.fetched_at is not None and not force:
            return
        src = self.source
        if src.local and not Path(src.repo_id).is_dir():
            raise ConfigError(f"repository {src.repo} does not exist", where=self._where,
                              hint="give the path of a git repository or a URL git can clone")
        with self.lock():
            if self.path.exists():
                self._check()
                self._remote(["fetch", "--prune", "--quiet", "origin"], "fetch from")
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
                shutil.rmtree(tmp, ignore_errors=True)
                try:
                    self._remote(["clone", "--mirror", "--quiet", "--", src.repo_id, str(tmp)],
                                 "clone")
                    os.replace(tmp, self.path)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
        self.fetched_at = time.time()

    def _remote(self, args: Sequence[str], action: str) -> None:
        """A git command that reads the source's repository (clone, fetch; the caller
        holds the lock). A failure, or no end within ``$ABBENCH_GIT_TIMEOUT`` seconds
        (default 1800; HTTP transfers slower than 1 KB/s for a minute end sooner), is a
        :class:`FetchError` saying what to do."""
        src = self.source
        timeout = _git_timeout()
        git_dir = None if args[0] == "clone" else self.path
        try:
            proc = _git([*_REMOTE_CONFIG, *args], git_dir=git_dir, check=False,
                        where=self._where, timeout=timeout)
        except BuildError as e:
            if not isinstance(e.__cause__, subprocess.TimeoutExpired):
                raise
            reason = f"no answer within {timeout:.0f} s (ABBENCH_GIT_TIMEOUT)"
        else:
            if proc.returncode == 0:
                return
            out = proc.stderr or proc.stdout
            said = [line for line in out.splitlines() if line.startswith(("fatal:", "error:"))]
            reason = "\n".join(said[:3]) if said else _last_lines(out, 3)
        if ".lock': File exists" in reason:
            hint = (f"a git command on the mirror was killed and left a lock, or one runs "
                    f"now: when none runs, remove the .lock file(s) named above, or the "
                    f"whole mirror {self.path} (abbench clones it again; nothing else is lost)")
        elif src.local:
            hint = (f"check that {src.repo} is a git repository you can read "
                    f"(git -C {src.repo_id} log -1)")
        else:
            hint = (f"check the network and the URL (git ls-remote {src.repo}); on a machine "
                    f"without network, clone it where there is one (git clone --mirror "
                    f"{src.repo} DIR), bring DIR here and set sources.{src.name}.repo to DIR")
        if git_dir is not None:
            hint += (f"; a full 40-digit commit id already in the mirror {self.path} builds "
                     f"without fetching")
        raise FetchError(f"cannot {action} {src.repo}: {reason}", where=self._where,
                         hint=hint)

    def _check(self) -> None:
        """The mirror is a bare mirror of this source's repo, or a clear error."""
        bare = _git(["rev-parse", "--is-bare-repository"], git_dir=self.path, check=False)
        url = _git(["config", "--get", "remote.origin.url"], git_dir=self.path, check=False)
        mirror = _git(["config", "--get", "remote.origin.mirror"], git_dir=self.path,
                      check=False)
        problem = None
        if bare.returncode != 0 or bare.stdout.strip() != "true":
            problem = "is not a bare git repository"
        elif url.stdout.strip() != self.source.repo_id:
            problem = f"mirrors {url.stdout.strip() or 'nothing'!r}, not {self.source.repo_id!r}"
        elif mirror.stdout.strip() != "true":
            problem = "is not a mirror (remote.origin.mirror is not true)"
        if problem:
            raise BuildError(f"the cached mirror {self.path} {problem}", where=self._where,
                             hint=f"remove {self.path}; abbench clones it again on the next "
                                  f"build (nothing else is lost)")

    def refs(self) -> list[str]:
        """Short names of every ref in the mirror (branches, tags, other refs)."""
        out = _git(["for-each-ref", "--format=%(refname)"], git_dir=self.path,
                   where=self._where).stdout.split()
        names = []
        for ref in out:
            for prefix in ("refs/heads/", "refs/tags/", "refs/remotes/", "refs/"):
                if ref.startswith(prefix):
                    names.append(ref[len(prefix):])
                    break
        return sorted(set(names))

    def _rev_parse(self, ref: str) -> str | None:
        proc = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
                    git_dir=self.path, check=False)
        sha = proc.stdout.strip()
        return sha if proc.returncode == 0 and _SHA.match(sha) else None

    def resolve(self, ref: str, *, what: str = "ref", fetch: bool = True) -> str:
        """The full commit id of ``ref`` (branch, tag, commit id or abbreviation,
        ``HEAD``). Fetches first unless ``ref`` is a full id already in the mirror."""
        where = f"source {self.source.name!r}, {what} {ref!r}"
        _check_ref_text(ref, what, where)
        if ref in ("HEAD", "@"):
            return self._resolve_head(where, fetch=fetch)
        if not (self.exists() and _SHA.match(ref) and self._rev_parse(ref)):
            if fetch or not self.exists():
                self.update()
            else:
                self._check()
        sha = self._rev_parse(ref)
        if sha is None:
            raise self._unknown(ref, what, where)
        return sha

    def _resolve_head(self, where: str, *, fetch: bool) -> str:
        src = self.source
        if src.local:
            dirty = _git(["status", "--porcelain", "--untracked-files=no"], cwd=Path(src.repo_id),
                         check=False, where=where)
            if dirty.returncode == 0 and dirty.stdout.strip():
                files = [line[3:] for line in dirty.stdout.splitlines()][:5]
                raise ConfigError(
                    f"HEAD of {src.repo} has uncommitted changes ({', '.join(files)}), which "
                    f"a build never includes", where=where,
                    hint="abbench builds committed refs only: commit (or stash) them and build "
                         "that commit, or name a branch, tag or commit id to build it as it is")
        if fetch or not self.exists():
            self.update()
        with self.lock():
            self._remote(["fetch", "--quiet", "origin", "+HEAD:refs/abbench/HEAD"],
                         "fetch HEAD from")
        sha = self._rev_parse("refs/abbench/HEAD")
        if sha is None:
            raise self._unknown("HEAD", "ref", where)
        return sha

    def _unknown(self, ref: str, what: str, where: str) -> ConfigError:
        names = self.refs()
        close = difflib.get_close_matches(ref, names, n=5, cutoff=0.5)
        listing = (f"closest refs: {', '.join(close)}" if close
                   else f"refs there: {', '.join(names[:8]) or 'none'}"
                        + (f" (and {len(names) - 8} more)" if len(names) > 8 else ""))
        fetched = ("fetched just now" if self.fetched_at is not None
                   else "not fetched (fetch=False)")
        show = (f"git -C {self.source.repo} log --oneline --all" if self.source.local
                else f"git ls-remote {self.source.repo}")
        return ConfigError(
            f"unknown {what} {ref!r} in source {self.source.name!r} ({self.source.repo}); "
            f"{listing}", where=where,
            hint=f"name a branch, tag or commit of {self.source.repo} (see `{show}`); the "
                 f"mirror {self.path} was {fetched}, and only commits on some branch or tag "
                 f"of the repository are fetched")

    def commit_info(self, sha: str) -> tuple[str, int]:
        """(subject, number of parents) of a commit."""
        out = _git(["log", "-1", "--format=%P%n%s", sha], git_dir=self.path,
                   where=self._where).stdout.split("\n", 1)
        return (out[1].strip() if len(out) > 1 else ""), len(out[0].split())


def resolve(source: Source, ref: str, cache: Path | str | None = None, *,
            fetch: bool = True) -> str:
    """The full commit id of ``ref`` in ``source`` (see :meth:`Mirror.resolve`)."""
    return Mirror(source, cache).resolve(ref, fetch=fetch)


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
                 timeout: float | None = None) -> BuiltArm:
    """The build of ``gitref`` with ``source``'s recipe: from the cache when its key was
    built before, else built now (one builder per key across processes and threads;
    others wait for it and get the cached result). ``jobs`` fills ``{jobs}`` (default
    ``$ABBENCH_JOBS`` or the number of CPUs); ``timeout`` bounds each step, in seconds."""
    t0 = time.monotonic()
    plan = plan_build(gitref, source, cache, fetch=fetch)
    where = f"source {source.name!r}, ref {gitref.describe()!r}"
    lock = plan.dir.parent / ".locks" / f"{plan.dir.name}.lock"
    with _flock(lock):
        marker = _read_marker(plan.dir)
        cached = bool(marker and marker.get("key") == plan.key
                      and _artifacts_present(plan.dir, source))
        if not cached:
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


def copy_build_log(built: BuiltArm, run_dir: Path | str, name: str | None = None) -> Path:
    """Copy the build's log into a run folder: ``<run>/logs/build-<name>.log`` (``name``
    defaults to the entry's folder name). Returns the copy's path."""
    dest = Path(run_dir) / "logs" / f"build-{name or built.dir.name}.log"
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built.log, dest)
    except OSError as e:
        raise StoreError(f"cannot copy the build log {built.log}: {e.strerror}",
                         where=str(dest), hint="check that the results folder is writable") from e
    return dest


# ---------------------------------------------------------------------------------------
# Listing and garbage collection


@dataclass(frozen=True)
class BuildEntry:
    """One folder under ``<cache>/builds``. ``complete``: has its marker (a folder
    without it is a failed or interrupted build). Times are seconds since the epoch."""

    path: Path
    source: str
    sha: str
    key: str
    size_bytes: int
    created: float
    last_used: float
    complete: bool
    ref: str | None = None
    patch: tuple[tuple[str, str], ...] = ()
    duration_s: float | None = None
    hits: int = 0


def list_builds(cache: Path | str | None = None) -> list[BuildEntry]:
    """Every build entry in the cache, most recently used first."""
    builds = cache_root(cache) / "builds"
    entries: list[BuildEntry] = []
    if not builds.is_dir():
        return entries
    for path in builds.iterdir():
        m = _ENTRY.match(path.name)
        if not m or not path.is_dir() or path.name.startswith("."):
            continue
        marker = _read_marker(path)
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        try:
            last_used = (path / "last_used").stat().st_mtime
        except OSError:
            last_used = mtime
        if marker is not None:
            entries.append(BuildEntry(
                path=path, source=str(marker.get("source", m["source"])),
                sha=str(marker.get("sha", m["sha"])), key=str(marker.get("key", m["key"])),
                size_bytes=int(marker.get("size_bytes") or _du(path)),
                created=float(marker.get("created") or mtime), last_used=last_used,
                complete=True, ref=marker.get("ref"),
                patch=tuple((str(op), str(s)) for op, s in marker.get("patch", [])),
                duration_s=marker.get("duration_s"), hits=_hits(path)))
        else:
            entries.append(BuildEntry(path=path, source=m["source"], sha=m["sha"], key=m["key"],
                                      size_bytes=_du(path), created=mtime,
                                      last_used=last_used, complete=False))
    entries.sort(key=lambda e: e.last_used, reverse=True)
    return entries


def gc(cache: Path | str | None = None, keep_days: float | None = None,
       max_bytes: int | None = None, dry_run: bool = False) -> list[BuildEntry]:
    """Remove build entries; returns those removed (or, with ``dry_run``, those that
    would be). Always: incomplete entries (failed or interrupted builds). With
    ``keep_days``: entries not used for that many days. With ``max_bytes``: then the
    least recently used until the rest fits. Entries locked by a running build are
    skipped. An entry's source tree (``src/``, a worktree of a mirror) goes with it, and
    the mirrors' records of removed worktrees are pruned. Also removes the worktree a
    failed build left under ``<cache>/src``. Mirrors and the ccache folder are left alone
    (ccache bounds its own size)."""
    if keep_days is not None and keep_days < 0:
        raise ConfigError(f"keep_days {keep_days} is negative", where="builds gc",
                          hint="give a number of days >= 0")
    if max_bytes is not None and max_bytes < 0:
        raise ConfigError(f"max_bytes {max_bytes} is negative", where="builds gc",
                          hint="give a size >= 0")
    root = cache_root(cache)
    entries = list_builds(root)
    now = time.time()
    doomed = [e for e in entries if not e.complete]
    doomed += [e for e in entries if e.complete and keep_days is not None
               and now - e.last_used > keep_days * 86400]
    if max_bytes is not None:
        kept = [e for e in entries if e not in doomed]
        total = sum(e.size_bytes for e in kept)
        for e in sorted(kept, key=lambda e: e.last_used):
            if total <= max_bytes:
                break
            doomed.append(e)
            total -= e.size_bytes
    removed: list[BuildEntry] = []
    removed_src = False
    for e in doomed:
        with _flock(root / "builds" / ".locks" / f"{e.path.name}.lock",
                    blocking=False) as locked:
            if not locked:
                continue
            if not dry_run:
                trash = e.path.with_name(f".trash-{e.path.name}-{os.getpid()}")
                try:
                    os.replace(e.path, trash)
                except OSError:
                    continue
                shutil.rmtree(trash, ignore_errors=True)
            removed.append(e)
    if not dry_run:  # worktrees of failed builds, when no build of that source runs
        for src in (root / "src").glob("*"):
            if src.is_dir() and not src.is_symlink():
                with _flock(src.with_name(f"{src.name}.lock"), blocking=False) as locked:
                    if locked:
                        shutil.rmtree(src, ignore_errors=True)
                        removed_src = True
    if (removed or removed_src) and not dry_run:
        for mirror in (root / "git").glob("*.git"):
            with _flock(mirror.with_suffix(".lock")):
                _git(["worktree", "prune"], git_dir=mirror, check=False)
    return removed


def render_builds(entries: Sequence[BuildEntry]) -> str:
    """A markdown table of entries, for ``abbench builds ls``."""
    def size(n: int) -> str:
        value = float(n)
        for unit in ("B", "KiB", "MiB"):
            if value < 1024:
                return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
            value /= 1024
        return f"{value:.1f} GiB"

    def when(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))

    rows = ["| source | ref | commit | size | created | last used | cache hits | state |",
            "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        rows.append(f"| {e.source} | {e.ref or '?'} | {e.sha[:12]} | {size(e.size_bytes)} | "
                    f"{when(e.created)} | {when(e.last_used)} | {e.hits} | "
                    f"{'complete' if e.complete else 'incomplete'} |")
    total = sum(e.size_bytes for e in entries)
    rows.append(f"\n{len(entries)} builds, {size(total)}")
    return "\n".join(rows)
