"""Arms built from git refs: pin their refs to commit ids, build what is missing.

:func:`pin` turns each ``git:`` arm's ref and patches into full commit ids (and
expands ``variants: leave_one_out`` into arms); a run stores them in run.json, and
``--resume`` pins from there instead of resolving again, so a moved branch cannot
change a running campaign. :func:`build_arms` builds (or finds in the cache) every
pinned arm and fills its ``{bin}``, ``{build}``, ``{src}`` placeholders.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from abbench.config.schema import ArmConfig, Config, GitSpec
from abbench.errors import ConfigError
from abbench.model.runmeta import GitMeta, RunMeta
from abbench.server.build import BuiltArm, ensure_built
from abbench.server.git import BuildError, FetchError, GitRef, Mirror, Source

Log = Callable[[str], None]


def source_of(cfg: Config, name: str) -> Source:
    sc = cfg.sources[name]
    repo = sc.repo
    if "://" not in repo and not re.match(r"^[^/]+@[^/:]+:", repo):
        p = Path(repo).expanduser()
        repo = str(p if p.is_absolute() else cfg.base_dir / p)
    return Source(name=name, repo=repo, steps=sc.steps, artifacts=sc.artifacts,
                  env=sc.env, prune=sc.prune)


def _variant_name(arm: str, commit: str) -> str:
    short = re.sub(r"[^A-Za-z0-9_.+-]", "-", commit[:12] if re.fullmatch(r"[0-9a-f]{13,}",
                                                                         commit) else commit)
    return f"{arm}-no-{short}"[:64]


def expand_variants(cfg: Config) -> Config:
    """``variants: leave_one_out`` -> one arm per commit, reverted from the candidate,
    placed after it."""
    loo = cfg.variants.leave_one_out if cfg.variants else None
    if loo is None or any(a.variant_of for a in cfg.arms):
        return cfg
    arms: list[ArmConfig] = []
    for a in cfg.arms:
        arms.append(a)
        if a.name == loo.arm and a.git is not None:
            for c in loo.commits:
                git = a.git.model_copy(update={"revert": [*a.git.revert, c], "sha": None,
                                               "patch": None})
                arms.append(a.model_copy(update={"name": _variant_name(a.name, c), "git": git,
                                                 "label": None, "commit": None,
                                                 "variant_of": (a.name, c)}))
    names = [a.name for a in arms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"a leave-one-out arm's name is taken: {', '.join(dup)}",
                          where=f"{cfg.source}: variants.leave_one_out",
                          hint="rename the arm that has that name")
    return cfg.model_copy(update={"arms": arms})


def pin(cfg: Config, pinned: Mapping[str, GitMeta] | None = None, *,
        cache: Path | str | None = None, fetch: bool = True, check_patches: bool = True,
        ) -> Config:
    """``cfg`` with every git arm's ``sha`` and ``patch`` set. ``pinned``: arm name ->
    {sha, patch} from a stored run (used as they are: nothing is resolved)."""
    cfg = expand_variants(cfg)
    mirrors: dict[str, Mirror] = {}
    arms: list[ArmConfig] = []
    for a in cfg.arms:
        if a.git is None:
            arms.append(a)
            continue
        g = a.git
        p = pinned.get(a.name) if pinned is not None else None
        if p is not None and p.sha:
            git = g.model_copy(update={"sha": p.sha, "patch": list(p.patch)})
            arms.append(a.model_copy(update={"git": git}))
            continue
        src = source_of(cfg, g.source)
        mirror = mirrors.setdefault(g.source, Mirror(src, cache))
        with _at(cfg, a):
            sha = mirror.resolve(g.ref, fetch=fetch)
            patch = [(op, mirror.resolve(r, what=op, fetch=fetch))
                     for op, refs in (("revert", g.revert), ("cherry-pick", g.cherry_pick))
                     for r in refs]
        if check_patches and patch:
            _check_patches(mirror, sha, patch, where=f"{cfg.source}: arm {a.name}.git")
        arms.append(a.model_copy(update={"git": g.model_copy(update={"sha": sha,
                                                                     "patch": patch})}))
    return cfg.model_copy(update={"arms": arms})


@contextlib.contextmanager
def _at(cfg: Config, arm: ArmConfig) -> Iterator[None]:
    """Errors of a git arm's mirror or build say where in the arms file: the source's
    ``repo`` for a clone or fetch that failed, else the arm."""
    assert arm.git is not None
    try:
        yield
    except FetchError as e:
        e.where = f"{cfg.source}: sources.{arm.git.source}.repo (for arm {arm.name})"
        raise
    except (ConfigError, BuildError) as e:
        e.where = f"{cfg.source}: arm {arm.name}.git ({e.where})"
        raise


def _check_patches(mirror: Mirror, sha: str, patch: list[tuple[str, str]], *,
                   where: str) -> None:
    """Each revert / cherry-pick applies cleanly on ``sha`` (in a scratch index of the
    mirror: no worktree), else a ConfigError naming the conflicting files."""
    with tempfile.TemporaryDirectory(prefix="abbench-patch-") as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git = ["git", f"--git-dir={mirror.path}"]
        subprocess.run([*git, "read-tree", sha], env=env, check=True, capture_output=True)
        for op, c in patch:
            a, b = (c, f"{c}^") if op == "revert" else (f"{c}^", c)
            diff = subprocess.run([*git, "diff", "--binary", a, b], env=env,
                                  capture_output=True)
            proc = subprocess.run([*git, "apply", "--cached", "-"], env=env,
                                  input=diff.stdout, capture_output=True)
            if proc.returncode != 0:
                err = proc.stderr.decode(errors="replace")
                files = sorted(set(re.findall(r"(?:patch failed|does not exist in index|"
                                              r"already exists in index): ([^:\n]+)", err)))
                raise ConfigError(
                    f"{op} of {c[:12]} does not apply cleanly on {sha[:12]}: conflicts in "
                    f"{', '.join(files) or err.strip()[:200]}", where=where,
                    hint=f"drop {c[:12]} from the {op} list (or the leave-one-out "
                         "commits), or resolve the conflict on a branch and build that")


def pins_of(meta: RunMeta) -> dict[str, GitMeta]:
    """arm name -> the commit and patch set run.json stores for it."""
    return {a.name: a.git for a in meta.arms if a.git is not None}


def gitref_of(g: GitSpec) -> GitRef:
    """The pinned :class:`GitRef` (ids, not names: a moved branch builds nothing new)."""
    assert g.sha is not None, "pin() first"
    patch = g.patch or []
    return GitRef(g.source, g.sha, revert=[s for op, s in patch if op == "revert"],
                  cherry_pick=[s for op, s in patch if op == "cherry-pick"], named=g.ref)


def build_arms(cfg: Config, *, cache: Path | str | None = None, jobs: int | None = None,
               log: Log | None = None, echo: Log | None = None
               ) -> tuple[Config, dict[str, BuiltArm]]:
    """Build (or find) every git arm of a pinned ``cfg``; the config with each arm's
    placeholders filled, and arm name -> :class:`BuiltArm`. A failed build raises
    :class:`BuildError` (exit 2) before any server starts. ``echo`` gets each line of a
    build's log while it builds."""
    built: dict[str, BuiltArm] = {}
    arms: list[ArmConfig] = []
    for a in cfg.arms:
        if a.git is None:
            arms.append(a)
            continue
        src = source_of(cfg, a.git.source)
        if log:
            log(f"build {a.name}: {a.git.source} {a.git.describe()}")
        with _at(cfg, a):
            b = ensure_built(gitref_of(a.git), src, cache=cache, jobs=jobs, fetch=False,
                             echo=echo)
        if log:
            log(f"  {'cache hit' if b.cached else 'built'} in {b.seconds:.1f} s: {b.dir}")
        built[a.name] = b
        first = next(iter(b.artifacts.values()))
        arms.append(a.model_copy(update={"built": {
            "bin": str(first), "build": str(b.build_dir), "src": str(b.src_dir),
            "log": str(b.log)}}))
    return cfg.model_copy(update={"arms": arms}), built


def describe_pins(cfg: Config) -> str:
    """One line per git arm: ``pr: llama.cpp slow -> 1a2b3c4... (patch: -abc1234)``."""
    lines = []
    for a in cfg.arms:
        if a.git is not None and a.git.sha:
            patch = " ".join(("-" if op == "revert" else "+") + s[:12]
                             for op, s in a.git.patch or [])
            lines.append(f"  {a.name}: {a.git.source} {a.git.ref} -> {a.git.sha}"
                         + (f" (patches {patch})" if patch else ""))
    return ("git arms (refs resolved):\n" + "\n".join(lines) + "\n") if lines else ""


def commit_range(cfg: Config, source: str, good: str, bad: str) -> list[str]:
    """``good``, then every first-parent commit after it up to ``bad``, oldest first."""
    mirror = Mirror(source_of(cfg, source))
    g = mirror.resolve(good, what="--good")
    b = mirror.resolve(bad, what="--bad")
    git = ["git", f"--git-dir={mirror.path}"]
    if subprocess.run([*git, "merge-base", "--is-ancestor", g, b]).returncode != 0:
        raise ConfigError(f"--good {good} ({g[:12]}) is not an ancestor of --bad {bad} "
                          f"({b[:12]})", where=f"source {source!r}",
                          hint="give a good commit older than the bad one, on its history")
    out = subprocess.run([*git, "rev-list", "--reverse", "--first-parent", f"{g}..{b}"],
                         capture_output=True, text=True, check=True).stdout.split()
    if not out:
        raise ConfigError("--good and --bad are the same commit", where=f"source {source!r}",
                          hint="give two different commits")
    return [g, *out]
