"""Arms resolved for a run: placeholders substituted, git arms' programs,
checks of programs, cpus and environment, warnings about the file."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
)

from abbench.config.infer import infer_preset, see
from abbench.config.presets import arm_preset, get_preset, with_overrides
from abbench.config.schema import ArmConfig, Config, GitSpec, Readiness
from abbench.config.values import _Frozen, format_cpus
from abbench.errors import ConfigError, clip, clip_repr


class ResolvedArm(_Frozen):
    """An arm with defaults and the preset applied: everything needed to start it."""

    name: str
    label: str
    commit: str | None
    preset: str
    #: the history series its runs join (None: the arm's name)
    series: str | None = None
    argv: list[str] = Field(description="template argv (or one shell string) with {placeholders}")
    shell: bool
    cwd: str
    env: dict[str, str]
    host: str
    port: int | Literal["auto"]
    ready: Readiness
    stop_grace: float
    request_timeout: float
    tokenize_path: str | None
    completions_path: str
    props_path: str | None
    request_extra: dict[str, Any]
    preset_fields: dict[str, Any] = Field(default_factory=dict)
    #: CPU ids the server is pinned to, and its niceness increment (None: as abbench's)
    cpus: list[int] | None = None
    nice: int | None = None
    #: the git arm's source, ref and resolved ids; None for a fixed binary
    git: GitSpec | None = None
    #: {bin}, {build}, {src} of a built git arm (not stored)
    built: dict[str, str] | None = Field(None, exclude=True)

    def command(self, placeholders: Mapping[str, str]) -> list[str]:
        """The argv to execute, with placeholders substituted into each item."""
        if self.shell:
            return ["/bin/sh", "-c", self.argv[0]]
        return [substitute(item, placeholders, where=f"arm {self.name}: start") for item in
                self.argv]


#: what a built git arm adds to its start's placeholders
GIT_PLACEHOLDERS = ("bin", "build", "src")
_BUILTIN_PLACEHOLDERS = ("port", "host", "arm", "round", "base_url")


class _Strict(dict):
    def __missing__(self, key: str) -> str:
        raise KeyError(key)


def substitute(template: str, values: Mapping[str, str], *, where: str) -> str:
    """``{name}`` -> value; ``{{`` and ``}}`` are literal braces."""
    try:
        return string.Formatter().vformat(template, (), _Strict(values))
    except KeyError as e:
        known = ", ".join("{" + k + "}" for k in values)
        raise ConfigError(f"unknown placeholder {{{clip(e.args[0], 60)}}} in "
                          f"{clip_repr(template)}", where=where,
                          hint=f"known placeholders: {known}; add it under vars:, or write "
                               "{{ and }} for literal braces" + see("arms")) from None
    except (ValueError, IndexError) as e:
        raise ConfigError(f"bad placeholder syntax in {clip_repr(template)}: {e}", where=where,
                          hint="placeholders look like {port}; write {{ and }} for literal "
                               "braces" + see("arms")) from None


def resolve_arms(cfg: Config) -> list[ResolvedArm]:
    """Every arm of ``cfg``, resolved (presets applied, start commands parsed); two arms
    with one label are refused: their columns and history series could not be told
    apart."""
    arms = [resolve_arm(cfg, a) for a in cfg.arms]
    labels = [a.label for a in arms]
    for label in sorted({x for x in labels if labels.count(x) > 1}):
        names = ", ".join(a.name for a in arms if a.label == label)
        raise ConfigError(f"arms {names} share the label {clip_repr(label, 60)}: their "
                          "columns and history series could not be told apart",
                          where=f"{cfg.source or 'arms file'}: arms",
                          hint="give each arm a label: of its own" + see("arms"))
    return arms


def resolve_arm(cfg: Config, arm: ArmConfig) -> ResolvedArm:

    d = cfg.defaults

    def pick(field: str) -> Any:
        v = getattr(arm, field)
        return v if v is not None else getattr(d, field)

    where = f"{cfg.source or 'arms file'}: arms[{cfg.arms.index(arm)}] ({arm.name})"
    preset_name = pick("preset") or infer_preset(pick("start"), cfg.vars) or "custom"
    preset = get_preset(preset_name)
    start = pick("start")
    if start is None or (isinstance(start, str) and not start.strip()) or start == []:
        raise ConfigError("no start command", where=f"{where}.start",
                          hint="give start: as an argv list, e.g. [llama-server, --port, "
                               "'{port}'], here or under defaults:" + see("arms"))
    shell = bool(pick("shell"))
    if shell:
        argv = [start if isinstance(start, str) else shlex.join(start)]
    else:
        try:
            argv = shlex.split(start) if isinstance(start, str) else [str(s) for s in start]
        except ValueError as e:  # an unbalanced quote
            raise ConfigError(f"cannot be split into arguments: {e}", where=f"{where}.start",
                              hint="close the quote, or give start: as an argv list"
                              + see("arms")) from None
    ready = pick("ready") or Readiness()
    if ready.path is None:
        ready = ready.model_copy(update={"path": preset.ready_path})
    env = {**(d.env or {}), **(arm.env or {})}
    cwd = Path(pick("cwd") or ".")
    if not cwd.is_absolute():
        cwd = cfg.base_dir / cwd
    extra = {**preset.request_extra, **(d.request_extra or {}), **(arm.request_extra or {})}
    preset_fields = {**(d.preset_fields or {}), **(arm.preset_fields or {})}
    with_overrides(preset, preset_fields, where=f"{where}.preset_fields")  # fail early
    return ResolvedArm(
        name=arm.name,
        label=arm.label or (f"{arm.name} {arm.git.sha[:7]}" if arm.git and arm.git.sha
                            else arm.name),
        commit=arm.commit or (arm.git.sha if arm.git else None),
        series=arm.series,
        preset=preset_name,
        argv=argv,
        shell=shell,
        cwd=str(cwd),
        env=env,
        host=pick("host") or "127.0.0.1",
        port=pick("port") or "auto",
        ready=ready,
        stop_grace=pick("stop_grace") if pick("stop_grace") is not None else 10.0,
        request_timeout=pick("request_timeout") or 600.0,
        tokenize_path=pick("tokenize_path") or preset.tokenize_path,
        completions_path=pick("completions_path") or preset.completions_path,
        props_path=pick("props_path") or preset.props_path,
        request_extra=extra,
        preset_fields=preset_fields,
        cpus=pick("cpus"),
        nice=pick("nice"),
        git=arm.git,
        built=arm.built,
    )


def check_arm(cfg: Config, arm: ResolvedArm, *, strict_exec: bool) -> list[str]:
    """Static checks of a resolved arm. Raises ConfigError; returns warnings.

    ``strict_exec``: a program that is not found on PATH is an error (``run``),
    not a warning (``validate``, which may run on another machine than the servers).
    """
    idx = cfg.arm_names.index(arm.name)
    where = f"{cfg.source or 'arms file'}: arms[{idx}] ({arm.name})"
    warnings: list[str] = check_cpus(arm, where=where, strict=strict_exec)
    if not Path(arm.cwd).is_dir():
        raise ConfigError(f"cwd {clip_repr(arm.cwd)} is not a directory", where=f"{where}.cwd",
                          hint="create it, or give a path relative to the arms file" + see("arms"))
    values = placeholder_values(cfg, arm, port=1, round_=0)
    if arm.shell:
        if re.search(r"\{(port|host|arm|round|base_url)\}", arm.argv[0]):
            raise ConfigError("placeholders are not substituted into a shell string",
                              where=f"{where}.start",
                              hint="with shell: true use $ABBENCH_PORT, $ABBENCH_HOST, "
                                   "$ABBENCH_ARM, $ABBENCH_ROUND from the environment"
                                   + see("arms"))
        if arm.port == "auto" and "ABBENCH_PORT" not in arm.argv[0]:
            raise ConfigError("the port is automatic but the shell command never uses "
                              "$ABBENCH_PORT", where=f"{where}.start",
                              hint="pass --port $ABBENCH_PORT (or the server's flag), or fix "
                                   "port: to a number")
        return warnings
    try:
        argv = arm.command(values)
    except ConfigError as e:  # name the file and field, not just the arm
        raise ConfigError(e.message, where=f"{where}.start", hint=e.hint) from None
    if arm.port == "auto" and not any("{port}" in a or "{base_url}" in a for a in arm.argv):
        raise ConfigError("the port is automatic but start never uses {port}",
                          where=f"{where}.start",
                          hint="add e.g. --port '{port}' so the server listens where abbench "
                               "looks, or set port: to a fixed number" + see("arms"))
    prog = argv[0]
    if arm.git is not None and arm.built is None:
        return warnings  # built later: abbench build / run check the artifacts
    if "/" in prog:
        p = Path(prog)
        if not p.is_absolute():
            p = Path(arm.cwd) / p
        if not p.exists():
            msg = f"program {clip_repr(prog)} does not exist"
            if strict_exec:
                raise ConfigError(msg, where=f"{where}.start[0]",
                                  hint="build the server first, or fix the path (relative "
                                       "paths start from cwd:, by default the arms file's "
                                       "folder)")
            warnings.append(f"{where}.start[0]: {msg} here (fine if the servers run "
                            "elsewhere; build it or fix the path)")
            return warnings
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise ConfigError(f"program {clip_repr(prog)} is not an executable file",
                              where=f"{where}.start[0]", hint=f"chmod +x {prog}, or fix the path")
    elif shutil.which(prog) is None:
        msg = f"program {clip_repr(prog)} is not on PATH"
        if strict_exec:
            raise ConfigError(msg, where=f"{where}.start[0]",
                              hint="install it, activate its environment, or give a full path")
        warnings.append(f"{where}: {msg} here (fine if the servers run elsewhere)")
    return warnings


def check_cpus(arm: ResolvedArm, *, where: str, strict: bool) -> list[str]:
    """``cpus:`` ids this machine lacks, and a negative ``nice:`` without the right to
    it: errors for ``run`` (``strict``), warnings for ``validate`` (the servers may run
    on another machine)."""
    problems: list[tuple[str, str, str]] = []
    count = os.cpu_count() or 1
    if arm.cpus is not None:
        missing = [c for c in arm.cpus if c >= count]
        if missing:
            problems.append((f"cpus {format_cpus(missing)} do not exist here (CPUs 0-"
                             f"{count - 1})", f"{where}.cpus",
                             f"name CPUs below {count}, or leave cpus: out"))
        else:
            allowed = os.sched_getaffinity(0)
            if not set(arm.cpus) & allowed:
                problems.append((f"cpus {format_cpus(arm.cpus)} are all outside the CPUs "
                                 f"abbench may use ({format_cpus(sorted(allowed))})",
                                 f"{where}.cpus", "name CPUs of that set (a cgroup or "
                                 "taskset limits abbench's own)"))
    if arm.nice is not None and arm.nice < 0 and os.geteuid() != 0:
        problems.append((f"nice {arm.nice} needs root (CAP_SYS_NICE): a process may only "
                         "lower its priority", f"{where}.nice",
                         "use a nice value of 0 or more, or run abbench as root"))
    if strict and problems:
        msg, at, hint = problems[0]
        raise ConfigError(msg, where=at, hint=hint)
    return [f"{at}: {msg} (fine if the servers run elsewhere)" for msg, at, _ in problems]


_BARE_VAR = re.compile(r"(?<!\$)\$([A-Za-z_][A-Za-z0-9_]*)")


def config_warnings(cfg: Config) -> list[str]:
    """What a config says that is probably not what was meant, though it can run:
    ``$NAME`` (not expanded: only ``${NAME}`` is), a seed that changes nothing, request
    fields that make decodes non-greedy."""
    src = cfg.source or "arms file"
    out: list[str] = []

    def bare(where: str, text: str) -> None:
        m = _BARE_VAR.search(text)
        if m:
            out.append(f"{where}: ${clip(m.group(1), 40)} is not expanded (only "
                       f"${{{clip(m.group(1), 40)}}} is taken from the environment)")

    for k, v in cfg.vars.items():
        bare(f"{src}: vars.{clip(k, 40)}", v)
    arms = resolve_arms(cfg)
    for i, (arm, raw) in enumerate(zip(arms, cfg.arms, strict=True)):
        where = f"{src}: arms[{i}] ({arm.name})"
        if not arm.shell:
            for a in arm.argv:
                bare(f"{where}.start", a)
        for k, v in arm.env.items():
            bare(f"{where}.env.{clip(k, 40)}", v)
        bare(f"{where}.cwd", raw.cwd or cfg.defaults.cwd or "")
        neutral = arm_preset(arm).request_extra  # the preset's own greedy fields
        odd = sorted(k for k in ("temperature", "top_p", "top_k") if k in arm.request_extra
                     and (k not in neutral or arm.request_extra[k] != neutral[k]))
        if odd:
            verb = "replaces" if len(odd) == 1 else "replace"
            out.append(f"{where}.request_extra: {', '.join(odd)} {verb} abbench's greedy "
                       "settings: fingerprints and quality checks are then not reproducible")
    if cfg.seed is not None and cfg.order != "interleaved":
        out.append(f"{src}: seed: {cfg.seed} changes nothing with order: {cfg.order} (only "
                   "interleaved orders are drawn)")
    return out


def placeholder_values(cfg: Config, arm: ResolvedArm, *, port: int, round_: int) -> dict[str, str]:
    values = dict(cfg.vars)
    values.update(port=str(port), host=arm.host, arm=arm.name, round=str(round_),
                  base_url=f"http://{arm.host}:{port}")
    if arm.git is not None:  # before the build: stand-ins, for the syntax check
        built = arm.built or {k: f"/unbuilt/{k}" for k in GIT_PLACEHOLDERS}
        values.update({k: built[k] for k in GIT_PLACEHOLDERS})
    return values
