"""arms.yaml: typed, frozen, validated.

``load_config(path)`` reads the file, expands ``${ENV}`` references, validates it
with pydantic and returns a :class:`Config`. Every error is a :class:`ConfigError`
naming the file, the line and field, and what to do.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from abbench import registry
from abbench.config.collectors import CollectorSettings
from abbench.config.presets import get_preset, with_overrides
from abbench.config.quality import FingerprintConfig, QualityConfig
from abbench.config.stats import StatsConfig
from abbench.errors import ConfigError
from abbench.model.rows import RowKey

SCHEMA_VERSION = 1

_CONTEXT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_context(value: int | str) -> int:
    """``"32K"`` -> 32768, ``"255K"`` -> 261120, ``"1000"`` -> 1000, ``"1M"`` -> 1048576."""
    if isinstance(value, bool):
        raise ValueError("a context length is a number of tokens such as 1000, 32K or 255K")
    if isinstance(value, int):
        n = value
    else:
        m = _CONTEXT_RE.match(str(value))
        if not m:
            raise ValueError(
                f"{value!r} is not a context length: write a number of tokens such as "
                "1000, 32K or 255K (K = 1024 tokens, M = 1024K)"
            )
        scale = {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
        n = int(float(m.group(1)) * scale)
    if n < 1:
        raise ValueError(f"a context length must be at least 1 token, got {value!r}")
    return n


def format_context(n: int) -> str:
    """32768 -> ``"32K"``; 1000 -> ``"1000"``."""
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)


Context = Annotated[int, BeforeValidator(parse_context)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Readiness(_Frozen):
    """How to tell that a freshly started server is ready."""

    path: str | None = Field(None, description="GET path that answers 200 when ready; "
                             "the preset's when not given")
    timeout: float = Field(600.0, gt=0, description="seconds to wait before the start is failed")
    interval: float = Field(0.05, gt=0, le=5, description="seconds between polls")


class ServerSpec(_Frozen):
    """The fields an arm shares with ``defaults``; every one may be left out."""

    preset: str | None = Field(None, description="llama.cpp, vllm, sglang, custom, or a "
                               "preset a package registers (abbench.presets)")
    start: list[str] | str | None = Field(
        None, description="argv list, or a string split like a shell would "
        "(run by a shell only with shell: true)")
    shell: bool | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    host: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)] | Literal["auto"] | None = None
    ready: Readiness | None = None
    stop_grace: float | None = Field(None, ge=0)
    request_timeout: float | None = Field(None, gt=0)
    tokenize_path: str | None = None
    completions_path: str | None = None
    props_path: str | None = None
    request_extra: dict[str, Any] | None = Field(
        None, description="fields merged into every completion request")
    preset_fields: dict[str, Any] | None = Field(
        None, description="overrides of other preset fields (metrics_path, flush_path, "
        "misses_counter, cached_tokens_fields, ...): abbench/presets.py lists them")

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str | None) -> str | None:
        known = registry.names("abbench.presets")
        if v is not None and v not in known:
            quoted = [repr(k) for k in known]
            raise PydanticCustomError("literal_error", "Input should be {expected}",
                                      {"expected": ", ".join(quoted[:-1]) + " or " + quoted[-1]})
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_as_str(cls, v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): ("" if val is None else str(val)) for k, val in v.items()}
        return v


class ArmConfig(ServerSpec):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", max_length=64)
    label: str | None = Field(None, description="column head, e.g. 'prod ecb52158'")
    commit: str | None = Field(None, description="commit id of the build, shown in ls/history")


class PromptSource(_Frozen):
    source: Literal["filler", "file"] = "filler"
    path: str | None = Field(None, description="text file whose tokens fill the prompt")

    @model_validator(mode="after")
    def _path_for_file(self) -> PromptSource:
        if self.source == "file" and not self.path:
            raise ValueError("prompt source 'file' needs a path")
        return self


class SideCalls(_Frozen):
    """Short requests sent while a long decode runs."""

    count: int = Field(4, ge=1, description="side calls per long decode")
    prompt_tokens: int = Field(128, ge=1)
    max_tokens: int = Field(16, ge=1)
    concurrency: int = Field(1, ge=1, description="side calls in flight at once")
    interval: float = Field(0.0, ge=0, description="seconds between side-call starts")
    delay: float = Field(0.2, ge=0, description="seconds after the long decode's first "
                         "token before the first side call")


class Arrival(_Frozen):
    """Open-loop arrivals: requests sent at these rates whatever is in flight."""

    rate: list[Annotated[float, Field(gt=0)]] = Field(
        min_length=1, description="requests per second; one level each")
    process: Literal["poisson", "constant"] = "poisson"
    seed: int | None = Field(None, ge=0, description="arrival times' seed; default the "
                             "run's (each round its own, every arm of a round the same)")
    max_concurrency: int | None = Field(None, ge=1, description="cap on requests in "
                                        "flight; none by default")


@dataclass(frozen=True)
class LoadLevel:
    """One level of a load workload: a concurrency (closed loop) or a rate (open)."""

    index: int
    concurrency: int | None
    rate: float | None

    @property
    def label(self) -> str:
        return f"c={self.concurrency}" if self.rate is None else f"rate={self.rate:g}/s"


class LoadSpec(_Frozen):
    """Many requests at once: throughput and latency percentiles per level."""

    concurrency: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="closed loop: requests kept in flight; one level each")
    requests: int = Field(64, ge=1, description="measured requests per level")
    warmup: int | None = Field(None, ge=0, description="requests sent first and left out; "
                               "default the level's concurrency (open loop: 1)")
    prompt_tokens: Context = Field(512, description="exact prompt length of every request")
    output_tokens: int = Field(128, ge=2, description="exact output length of every request")
    arrival: Literal["closed"] | Arrival = "closed"
    timeout: float = Field(600.0, gt=0, description="seconds all levels may take in one "
                           "server life; requests still running then are cut")

    @field_validator("concurrency", mode="before")
    @classmethod
    def _one_or_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _levels(self) -> LoadSpec:
        if self.arrival == "closed" and not self.concurrency:
            raise ValueError("a closed-loop load needs concurrency: (e.g. [1, 8, 32]), or "
                             "arrival: {rate: [...]} for open-loop arrivals")
        if self.arrival != "closed" and self.concurrency:
            raise ValueError("concurrency: sets closed-loop levels; with arrival rates, "
                             "cap requests in flight with arrival: {max_concurrency: N}")
        return self

    def levels(self) -> list[LoadLevel]:
        if isinstance(self.arrival, Arrival):
            return [LoadLevel(i, None, r) for i, r in enumerate(self.arrival.rate)]
        return [LoadLevel(i, c, None) for i, c in enumerate(self.concurrency or [])]

    def warmup_for(self, level: LoadLevel) -> int:
        if self.warmup is not None:
            return self.warmup
        return level.concurrency if level.concurrency is not None else 1


class Slo(_Frozen):
    """Bounds a request must meet to count towards goodput (each optional)."""

    ttft_ms: float | None = Field(None, gt=0, description="time to first token")
    itl_ms: float | None = Field(None, gt=0, description="the request's mean inter-token "
                                 "latency, (last chunk - first) / (tokens - 1)")
    e2e_ms: float | None = Field(None, gt=0, description="end-to-end latency")

    @model_validator(mode="after")
    def _some_bound(self) -> Slo:
        if self.ttft_ms is None and self.itl_ms is None and self.e2e_ms is None:
            raise ValueError("an slo needs at least one of ttft_ms, itl_ms, e2e_ms")
        return self


class Workload(_Frozen):
    kind: Literal["decode", "load"] = "decode"
    name: str | None = Field(None, description="row name; default 'decode' "
                             "(+ ' + side calls'), or 'load'")
    contexts: list[Context] = Field(default_factory=list, min_length=1)
    decode_tokens: int = Field(128, ge=2)
    side_calls: SideCalls | None = None
    prompt: PromptSource = PromptSource()
    load: LoadSpec | None = Field(None, description="a load workload: concurrency levels "
                                  "or arrival rates (see README, Load workloads)")
    slo: Slo | None = Field(None, description="load only: goodput counts requests meeting it")

    @model_validator(mode="before")
    @classmethod
    def _kind_from_load(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("load") is not None and "kind" not in data:
            return {**data, "kind": "load"}
        return data

    @model_validator(mode="after")
    def _decode_or_load(self) -> Workload:
        if self.kind == "load":
            if self.load is None:
                raise ValueError("kind: load needs a load: mapping (concurrency:, ...)")
            if self.contexts or self.side_calls:
                raise ValueError("a load workload takes prompt_tokens: inside load:, not "
                                 "contexts: or side_calls:")
        else:
            if not self.contexts:
                raise PydanticCustomError("missing", "Field required: contexts (or load: "
                                          "for a load workload)")
            if self.slo is not None:
                raise ValueError("slo: belongs to a load workload (load:)")
        return self

    @property
    def title(self) -> str:
        if self.name:
            return self.name
        if self.load is not None:
            return "load"
        return "decode + side calls" if self.side_calls else "decode"

    def row_name(self, context: int) -> str:
        """The row id stored with every sample (``workload`` in samples.jsonl)."""
        base = self.title
        if base.startswith("decode"):
            return f"decode {format_context(context)}{base[len('decode'):]}"
        return f"{base} {format_context(context)}"

    def row_key(self, context: int) -> RowKey:
        return RowKey(self.row_name(context), context, self.decode_tokens,
                      self.side_calls is not None)

    def load_row(self, level: LoadLevel) -> str:
        """A load level's row id: ``load c=8``, ``load rate=2/s``."""
        return f"{self.title} {level.label}"

    def row_keys(self) -> list[RowKey]:
        """Every row this workload makes."""
        if self.load is not None:
            return [RowKey(self.load_row(lv), self.load.prompt_tokens, self.load.output_tokens)
                    for lv in self.load.levels()]
        return [self.row_key(c) for c in self.contexts]


def _describe(w: Workload) -> str:
    if w.load is not None:
        return f"{w.title!r}: " + ", ".join(lv.label for lv in w.load.levels())
    ctx = ", ".join(format_context(c) for c in w.contexts)
    return f"{w.title!r}: contexts {ctx}, decode_tokens {w.decode_tokens}"


class Config(_Frozen):
    schema_version: Literal[1] = 1
    arms: list[ArmConfig] = Field(min_length=2)
    baseline: str | None = Field(None, description="name of the baseline arm; the first if unset")
    defaults: ServerSpec = ServerSpec()
    rounds: int = Field(3, ge=1, le=10000)
    reps: int = Field(1, ge=1, le=1000)
    order: Literal["interleaved", "alternate", "sequential"] = "interleaved"
    seed: int | None = Field(None, ge=0)
    warmup: int = Field(1, ge=0, description="warm-up requests discarded after each start")
    workloads: list[Workload] = Field(min_length=1)
    results: str = "results"
    vars: dict[str, str] = Field(default_factory=dict)
    # -- statistics (verdicts, noise band, until-ci): fields below this line
    stats: StatsConfig = Field(default_factory=StatsConfig, description="verdicts: alpha, "
                               "noise_band(s); rounds until confident: until_ci, max_rounds")

    # -- collectors (VRAM, RSS, counters, drift signals): fields below this line
    collectors: list[CollectorSettings] = Field(
        default_factory=list, description="extra metrics: vram, rss, prometheus, "
        "response_field, log_regex, drift, flush (abbench/config/collectors.py)")

    quality: QualityConfig | None = Field(None, description="quality checks (abbench/quality)")
    fingerprints: FingerprintConfig | None = Field(
        None, description="greedy-output fingerprints of prompt sets (abbench/quality)")

    # Set by load_config: where the file was, for relative paths and messages.
    source: str | None = Field(None, exclude=True)

    @field_validator("vars", mode="before")
    @classmethod
    def _vars_as_str(cls, v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): str(val) for k, val in v.items()}
        return v

    @field_validator("arms")
    @classmethod
    def _unique_names(cls, arms: list[ArmConfig]) -> list[ArmConfig]:
        names = [a.name for a in arms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"arm names must be unique; repeated: {', '.join(dup)}")
        return arms

    @field_validator("workloads")
    @classmethod
    def _unique_rows(cls, workloads: list[Workload]) -> list[Workload]:
        """Two workloads must never make the same row: their rates would be averaged
        into one cell."""
        seen: dict[str, int] = {}
        for i, w in enumerate(workloads):
            for key in w.row_keys():
                if key.row in seen:
                    j = seen[key.row]
                    raise PydanticCustomError(
                        "duplicate_row",
                        "workloads[{j}] ({a}) and workloads[{i}] ({b}) both make the row "
                        "{row}; give one a name: (e.g. name: {hint}) or other contexts",
                        {"j": j, "i": i, "a": _describe(workloads[j]), "b": _describe(w),
                         "row": repr(key.row),
                         "hint": f"load-{i}" if w.load else f"decode-{w.decode_tokens}"})
                seen[key.row] = i
        return workloads

    @model_validator(mode="after")
    def _check_arms(self) -> Config:
        names = [a.name for a in self.arms]
        if self.baseline is not None and self.baseline not in names:
            raise PydanticCustomError(
                "baseline", "baseline {baseline} is not an arm; arms: {arms}",
                {"baseline": repr(self.baseline), "arms": ", ".join(names)})
        return self

    @property
    def baseline_name(self) -> str:
        return self.baseline or self.arms[0].name

    @property
    def base_dir(self) -> Path:
        return Path(self.source).resolve().parent if self.source else Path.cwd()

    def arm(self, name: str) -> ArmConfig:
        for a in self.arms:
            if a.name == name:
                return a
        raise ConfigError(f"no arm named {name!r}", hint=f"arms: {', '.join(self.arm_names)}")

    @property
    def arm_names(self) -> list[str]:
        return [a.name for a in self.arms]

    def resolved_arms(self) -> list[ResolvedArm]:
        return [resolve_arm(self, a) for a in self.arms]


# --------------------------------------------------------------------------- arms


class ResolvedArm(_Frozen):
    """An arm with defaults and the preset applied: everything needed to start it."""

    name: str
    label: str
    commit: str | None
    preset: str
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

    def command(self, placeholders: Mapping[str, str]) -> list[str]:
        """The argv to execute, with placeholders substituted into each item."""
        if self.shell:
            return ["/bin/sh", "-c", self.argv[0]]
        return [substitute(item, placeholders, where=f"arm {self.name}: start") for item in
                self.argv]


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
        raise ConfigError(f"unknown placeholder {{{e.args[0]}}} in {template!r}", where=where,
                          hint=f"known placeholders: {known}; add it under vars:, or write "
                               "{{ and }} for literal braces") from None
    except (ValueError, IndexError) as e:
        raise ConfigError(f"bad placeholder syntax in {template!r}: {e}", where=where,
                          hint="placeholders look like {port}; write {{ and }} for literal "
                               "braces") from None


def resolve_arm(cfg: Config, arm: ArmConfig) -> ResolvedArm:

    d = cfg.defaults

    def pick(field: str) -> Any:
        v = getattr(arm, field)
        return v if v is not None else getattr(d, field)

    where = f"{cfg.source or 'arms file'}: arms[{cfg.arms.index(arm)}] ({arm.name})"
    preset_name = pick("preset") or "custom"
    preset = get_preset(preset_name)
    start = pick("start")
    if start is None or (isinstance(start, str) and not start.strip()) or start == []:
        raise ConfigError("no start command", where=f"{where}.start",
                          hint="give start: as an argv list, e.g. [llama-server, --port, "
                               "'{port}'], here or under defaults:")
    shell = bool(pick("shell"))
    if shell:
        argv = [start if isinstance(start, str) else shlex.join(start)]
    else:
        argv = shlex.split(start) if isinstance(start, str) else [str(s) for s in start]
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
        label=arm.label or arm.name,
        commit=arm.commit,
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
    )


def check_arm(cfg: Config, arm: ResolvedArm, *, strict_exec: bool) -> list[str]:
    """Static checks of a resolved arm. Raises ConfigError; returns warnings.

    ``strict_exec``: a program that is not found on PATH is an error (``run``),
    not a warning (``validate``, which may run on another machine than the servers).
    """
    idx = cfg.arm_names.index(arm.name)
    where = f"{cfg.source or 'arms file'}: arms[{idx}] ({arm.name})"
    warnings: list[str] = []
    if not Path(arm.cwd).is_dir():
        raise ConfigError(f"cwd {arm.cwd!r} is not a directory", where=f"{where}.cwd",
                          hint="create it, or give a path relative to the arms file")
    values = placeholder_values(cfg, arm, port=1, round_=0)
    if arm.shell:
        if re.search(r"\{(port|host|arm|round|base_url)\}", arm.argv[0]):
            raise ConfigError("placeholders are not substituted into a shell string",
                              where=f"{where}.start",
                              hint="with shell: true use $ABBENCH_PORT, $ABBENCH_HOST, "
                                   "$ABBENCH_ARM, $ABBENCH_ROUND from the environment")
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
                               "looks, or set port: to a fixed number")
    prog = argv[0]
    if "/" in prog:
        p = Path(prog)
        if not p.is_absolute():
            p = Path(arm.cwd) / p
        if not p.exists():
            raise ConfigError(f"program {prog!r} does not exist", where=f"{where}.start[0]",
                              hint="build it first (scripts/realparts.sh builds llama-server) "
                                   "or fix the path")
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise ConfigError(f"program {prog!r} is not an executable file",
                              where=f"{where}.start[0]", hint=f"chmod +x {prog}, or fix the path")
    elif shutil.which(prog) is None:
        msg = f"program {prog!r} is not on PATH"
        if strict_exec:
            raise ConfigError(msg, where=f"{where}.start[0]",
                              hint="install it, activate its environment, or give a full path")
        warnings.append(f"{where}: {msg} here (fine if the servers run elsewhere)")
    return warnings


def placeholder_values(cfg: Config, arm: ResolvedArm, *, port: int, round_: int) -> dict[str, str]:
    values = dict(cfg.vars)
    values.update(port=str(port), host=arm.host, arm=arm.name, round=str(round_),
                  base_url=f"http://{arm.host}:{port}")
    return values


# ------------------------------------------------------------------------- loading

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(text: str, *, where: str, environ: Mapping[str, str] | None = None) -> str:
    """``${NAME}`` and ``${NAME:-default}`` from the environment."""
    environ = os.environ if environ is None else environ

    def repl(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in environ and environ[name] != "":
            return environ[name]
        if default is not None:
            return os.path.expanduser(default)
        raise ConfigError(f"environment variable {name} is not set", where=where,
                          hint=f"export {name}=..., or write ${{{name}:-default}}")

    return _ENV_RE.sub(repl, text)


def _expand_tree(node: Any, path: tuple[Any, ...], src: str,
                 lines: dict[tuple[Any, ...], int] | None = None) -> Any:
    if isinstance(node, str):
        line = (lines or {}).get(path)
        at = f"line {line}, " if line else ""
        return expand_env(node, where=f"{src}: {at}{_fmt_loc(path)}")
    if isinstance(node, list):
        return [_expand_tree(v, (*path, i), src, lines) for i, v in enumerate(node)]
    if isinstance(node, dict):
        return {k: _expand_tree(v, (*path, k), src, lines) for k, v in node.items()}
    return node


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _line_map(text: str) -> dict[tuple[Any, ...], int]:
    """Map each YAML path to its 1-based line, for error messages."""
    lines: dict[tuple[Any, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[Any, ...]) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = k.value
                lines[(*path, key)] = k.start_mark.line + 1
                walk(v, (*path, key))
                lines[(*path, key)] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i))

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


_HINTS = {
    "extra_forbidden": "remove it or check its spelling; README.md lists every field",
    "missing": "add it; README.md's arms.yaml reference shows an example",
    "literal_error": "use one of the values listed",
    "too_short": "give at least the number of items asked for",
    "int_parsing": "write a whole number, without quotes or units",
    "int_from_float": "write a whole number",
    "int_type": "write a whole number",
    "float_parsing": "write a number",
    "bool_parsing": "write true or false",
    "greater_than_equal": "use a larger value (the smallest allowed is named)",
    "greater_than": "use a larger value (the bound is named)",
    "less_than_equal": "use a smaller value (the largest allowed is named)",
    "string_pattern_mismatch": "names use letters, digits and _ . + - only (no spaces), "
                               "starting with a letter or digit",
    "dict_type": "write it as a mapping: one NAME: value per line",
    "list_type": "write it as a list: [a, b] or one '- item' per line",
    "string_type": "write a string (quote it if YAML reads it as something else)",
    "value_error": "see the message; README.md documents each field",
    "baseline": "set baseline: to one of the arm names, or leave it out (the first arm)",
}

# pydantic names the member of a union that failed ("int", "literal['auto']"):
# not a field, left out of the field path.
_UNION_TAGS = {"int", "str", "float", "bool", "list", "dict", "constrained-int"}


def config_from_data(data: Any, *, source: str, text: str = "") -> Config:
    if not isinstance(data, dict):
        raise ConfigError("the file must be a YAML mapping (arms:, workloads:, ...)", where=source,
                          hint="see arms/llama-cpu.yaml for an example")
    lines = _line_map(text)
    data = _expand_tree(data, (), source, lines)
    try:
        cfg = Config.model_validate({**data, "source": source})
    except ValidationError as e:
        raise _config_error(e, source, lines) from None
    return cfg


def _config_error(e: ValidationError, source: str,
                  lines: dict[tuple[Any, ...], int]) -> ConfigError:
    by_loc: dict[tuple[Any, ...], list[str]] = {}
    hint = None
    for err in e.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and (
            "[" in p or p.startswith("function") or p in _UNION_TAGS)))
        if err["type"] == "baseline":
            loc = ("baseline",)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown key {loc[-1]!r}"
        if msg.startswith("arm names must be unique"):
            hint = hint or "give each arm its own name"
        by_loc.setdefault(loc, []).append(msg)
        hint = hint or _HINTS.get(err["type"])
    msgs = []
    for loc, parts in by_loc.items():  # a union's members: "a valid integer, or 'auto'"
        line = None
        probe = loc
        while probe and line is None:
            line = lines.get(probe)
            probe = probe[:-1]
        at = f"line {line}, " if line else ""
        msgs.append(f"{at}{_fmt_loc(loc)}: " + ", or ".join(parts))
    return ConfigError("; ".join(msgs), where=source,
                       hint=hint or "fix the field named; README.md documents each field")


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the
    last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            try:
                key = self.construct_object(key_node, deep=deep)
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (first on line {first})",
                    key_node.start_mark)
        return super().construct_mapping(node, deep)


def _check_files(cfg: Config, src: str, lines: dict[tuple[Any, ...], int]) -> None:
    """Files the config names that must exist before a run (prompt texts)."""
    for i, w in enumerate(cfg.workloads):
        if w.prompt.source == "file" and w.prompt.path:
            p = Path(w.prompt.path)
            p = p if p.is_absolute() else cfg.base_dir / p
            if not p.is_file():
                loc = ("workloads", i, "prompt", "path")
                line = lines.get(loc) or lines.get(loc[:3])
                at = f"line {line}, " if line else ""
                raise ConfigError(f"{at}{_fmt_loc(loc)}: the prompt file {str(p)!r} does not "
                                  "exist", where=src,
                                  hint="give a text file, relative to the arms file")


def load_config(path: str | os.PathLike[str]) -> Config:
    p = Path(path)
    src = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such file", where=src, hint="give the path of an arms file, "
                          "e.g. arms/llama-cpu.yaml") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the file: {e}", where=src) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        twice = "given twice" in problem
        raise ConfigError(f"{at}{'YAML error' if twice else 'YAML syntax error'}: {problem}",
                          where=src, hint="keep one of them" if twice else
                          "check indentation and quoting near that line") from None
    if data is None:
        raise ConfigError("the file is empty", where=src,
                          hint="see arms/llama-cpu.yaml for an example")
    cfg = config_from_data(data, source=src, text=text)
    for arm in cfg.resolved_arms():  # resolves presets and start commands: fail early
        check_arm(cfg, arm, strict_exec=False)
    _check_files(cfg, src, _line_map(text))
    return cfg


_SECRET_RE = re.compile(r"KEY|TOKEN|SECRET|PASSW", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_RE.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: ("***" if is_secret_name(k) and v else v) for k, v in env.items()}


def secret_values(*envs: Mapping[str, str]) -> list[str]:
    """Values of the secret-looking variables of ``envs``, longest first, to be
    scrubbed from anything abbench writes. Short values and paths are left out: they
    are not secrets, and scrubbing them would mangle unrelated text."""
    vals = {v for env in envs for k, v in env.items()
            if is_secret_name(k) and len(v) >= 6 and not v.startswith(("/", "~", "."))}
    return sorted(vals, key=len, reverse=True)


def scrub(obj: Any, values: list[str]) -> Any:
    """``obj`` (str, or lists/dicts of them) with every secret value replaced by ***."""
    if isinstance(obj, str):
        for v in values:
            obj = obj.replace(v, "***")
        return obj
    if isinstance(obj, list):
        return [scrub(v, values) for v in obj]
    if isinstance(obj, dict):
        return {k: scrub(v, values) for k, v in obj.items()}
    return obj


def config_secret_values(cfg: Config) -> list[str]:
    """Secret values a config can carry: its env and vars, and the environment's
    (``${HF_TOKEN}`` expands into start commands)."""
    envs: list[Mapping[str, str]] = [os.environ, cfg.vars, cfg.defaults.env or {}]
    envs += [a.env or {} for a in cfg.arms]
    return secret_values(*envs)


def config_for_storage(cfg: Config) -> dict[str, Any]:
    """The resolved config as stored with a run, secrets redacted."""
    data = cfg.model_dump(mode="json", exclude_none=True)
    for arm in data.get("arms", []):
        if "env" in arm:
            arm["env"] = redact_env(arm["env"])
    if "env" in data.get("defaults", {}):
        data["defaults"]["env"] = redact_env(data["defaults"]["env"])
    data["vars"] = redact_env(data.get("vars", {}))
    data["resolved_arms"] = [
        {**a.model_dump(mode="json"), "env": redact_env(a.env)} for a in cfg.resolved_arms()
    ]
    return scrub(data, config_secret_values(cfg))
