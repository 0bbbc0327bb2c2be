"""Git for builds: a source (a repository and its build recipe), a ref in it with its
patch set, the cache's bare mirror of each repository, and the cache root with its
locks. :mod:`abbench.server.build` builds what :func:`resolve` resolves.

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
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abbench.errors import AbbenchError, ConfigError, StoreError

Step = str | Sequence[str]

PLACEHOLDERS = ("{src}", "{build}", "{jobs}", "{ccache}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
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
    """The build cache's root: ``cache``, else ``$ABBENCH_BUILD_CACHE``, else
    ``$ABBENCH_CACHE``, else ``~/.cache/abbench``, made absolute with symlinks resolved
    (ccache compares real paths). ``ABBENCH_BUILD_CACHE`` names the builds alone, where
    ``ABBENCH_CACHE`` may point elsewhere (the test session's own state does)."""
    root = Path(cache if cache is not None else os.environ.get("ABBENCH_BUILD_CACHE")
                or os.environ.get("ABBENCH_CACHE") or Path.home() / ".cache" / "abbench")
    root = Path(os.path.realpath(root.expanduser()))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the cache folder: {e.strerror}", where=str(root),
                         hint="set ABBENCH_BUILD_CACHE (or ABBENCH_CACHE) to a writable "
                              "folder") from e
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
