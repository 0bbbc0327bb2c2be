"""The build cache's administration: every entry listed (``abbench builds ls``) and
garbage collection by age and size (``abbench builds gc``).

Layout under the cache root (``$ABBENCH_BUILD_CACHE``, else ``$ABBENCH_CACHE``, default
``~/.cache/abbench``)::

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
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from abbench.errors import ConfigError

# ---------------------------------------------------------------------------------------
# Listing and garbage collection
from abbench.server.build import _du, _hits, _read_marker
from abbench.server.git import _flock, _git, cache_root

_ENTRY = re.compile(r"^(?P<source>.+)-(?P<sha>[0-9a-f]{12})-(?P<key>[0-9a-f]{12})$")


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
