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
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from abbench import registry
from abbench.config.base import Frozen, endpoint_path, parse_context
from abbench.config.capacity import CapacitySpec
from abbench.config.collectors import CollectorSettings
from abbench.config.files import ARMS_FILE_MAX, PROMPT_TEXT_MAX, load_yaml, read_text
from abbench.config.infer import README_ARMS, did_you_mean, fields_at, infer_preset
from abbench.config.presets import arm_preset, get_preset, with_overrides
from abbench.config.quality import FingerprintConfig, QualityConfig
from abbench.config.secrets import (
    argv_secrets,
    environment_secrets,
    is_secret_name,
    nested_secrets,
    remember,
    scrub,
)
from abbench.config.speculative import SpeculativeConfig
from abbench.config.stats import StatsConfig, TableConfig
from abbench.config.traffic import SessionsSpec, TraceSpec
from abbench.errors import ConfigError, clip, clip_repr
from abbench.model.rows import RowKey

SCHEMA_VERSION = 1

#: rounds x arms of one arms file (each is a server start)
MAX_SERVER_LIVES = 100_000

def parse_cpus(value: Any) -> list[int]:
    """``"0-3,8"`` -> [0, 1, 2, 3, 8]; ``[2, 0]`` -> [0, 2]; ``3`` -> [3]."""
    if isinstance(value, bool):
        raise ValueError("cpus is a list of CPU ids or a range string such as '0-7'")
    if isinstance(value, int):
        value = [value]
    ids: set[int] = set()
    if isinstance(value, str):
        for part in value.replace(" ", "").split(","):
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
            if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
                raise ValueError(f"{value!r} is not a CPU list: write ids and ranges such "
                                 "as '0-7' or '0-3,8-11'")
            ids.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{v!r} is not a CPU id: ids are whole numbers from 0")
            ids.add(v)
    else:
        raise ValueError("cpus is a list of CPU ids or a range string such as '0-7'")
    if not ids:
        raise ValueError("cpus names no CPU")
    return sorted(ids)


def format_cpus(ids: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> ``"0-3,8"`` (the kernel's list format, as in Cpus_allowed_list)."""
    parts: list[str] = []
    start = prev = None
    for i in sorted(ids):
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def format_context(n: int) -> str:
    """32768 -> ``"32K"``; 1000 -> ``"1000"``."""
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)


Context = Annotated[int, BeforeValidator(parse_context)]


def _scalars_as_text(values: Mapping[Any, Any], what: str) -> dict[str, str]:
    """``vars:`` and ``env:`` values: text. Numbers come as written in the file (see
    :func:`config_from_data`); a YAML boolean or null, a list or a mapping is refused
    (``FLAG: yes`` used to become "True", ``X:`` "")."""
    out: dict[str, str] = {}
    for k, val in values.items():
        name = clip(k, 60)
        if isinstance(val, bool) or val is None:
            shown = "null" if val is None else str(val).lower()
            raise PydanticCustomError(
                "text_value", "{name} is {shown}, not text: quote it ({name}: \"{text}\") to "
                "set the text", {"name": name, "shown": f"YAML's {shown}",
                                  "text": "" if val is None else str(val).lower()})
        if isinstance(val, (list, dict)):
            raise PydanticCustomError(
                "text_value", "{name} is a {kind}: {what} values are text",
                {"name": name, "kind": "list" if isinstance(val, list) else "mapping",
                 "what": what})
        out[str(k)] = str(val)
    return out


#: request fields abbench sets itself: request_extra may not change them
_OWNED_FIELDS = frozenset({"prompt", "messages", "stream", "stream_options", "max_tokens",
                           "ignore_eos"})
#: preset fields that carry the decode length (abbench fills them in)
_LENGTH_FIELDS = frozenset({"n_predict", "min_tokens"})


class _Frozen(Frozen):
    pass


class Readiness(_Frozen):
    """How to tell that a freshly started server is ready."""

    path: str | None = Field(None, description="GET path that answers 200 when ready; "
                             "the preset's when not given")
    timeout: float = Field(600.0, gt=0, description="seconds to wait before the start is failed")
    interval: float = Field(0.05, gt=0, le=5, description="seconds between polls")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        return endpoint_path(v)


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
        "misses_counter, cached_tokens_fields, ...): abbench/config/presets.py lists them")
    cpus: list[int] | None = Field(
        None, description="CPU ids the server may run on (sched_setaffinity before exec): "
        "a list [0, 1, 2], or a string such as '0-7' or '0-3,8-11'")
    nice: int | None = Field(None, ge=-20, le=19, description="added to the server's "
                             "niceness before exec (os.nice, like nice -n)")

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str | None) -> str | None:
        known = registry.names("abbench.presets")
        if v is not None and v not in known:
            quoted = [repr(k) for k in known]
            raise PydanticCustomError("literal_error", "Input should be {expected}",
                                      {"expected": ", ".join(quoted[:-1]) + " or " + quoted[-1]})
        return v

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpu_list(cls, v: Any) -> Any:
        return None if v is None else parse_cpus(v)

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_as_str(cls, v: Any) -> Any:
        if isinstance(v, Mapping):
            for k in v:
                if not isinstance(k, str) or not k or "=" in k or "\0" in k:
                    raise PydanticCustomError(
                        "env_name", "{name} is not an environment variable name",
                        {"name": clip_repr(k, 60)})
            return _scalars_as_text(v, "environment variable")
        return v

    @field_validator("host")
    @classmethod
    def _bare_host(cls, v: str | None) -> str | None:
        if v is not None and (not v or re.search(r"[\s/]|://", v)
                              or (v.count(":") == 1 and not v.startswith("["))):
            raise PydanticCustomError(
                "host", "{host} is not a host name or address (no scheme, port or path)",
                {"host": clip_repr(v, 80)})
        return v

    @field_validator("tokenize_path", "completions_path", "props_path")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        return endpoint_path(v)

    @field_validator("start", mode="before")
    @classmethod
    def _no_mapping_items(cls, v: Any) -> Any:
        for i, item in enumerate(v if isinstance(v, list) else []):
            if isinstance(item, dict):
                raise PydanticCustomError(
                    "start_mapping", "item {i} is a mapping: YAML reads an unquoted {ph} "
                    "as one", {"i": i, "ph": "{port}"})
        return v

    @field_validator("start")
    @classmethod
    def _no_nul(cls, v: Any) -> Any:
        items = [v] if isinstance(v, str) else v or []
        if any("\0" in item for item in items):
            raise PydanticCustomError("nul", "holds a NUL character, which no command line "
                                      "can carry", {})
        return v

    @field_validator("request_extra")
    @classmethod
    def _extra_keeps_the_measurement(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        owned = sorted(k for k in v or {} if k in _OWNED_FIELDS
                       or (k in _LENGTH_FIELDS and v is not None and v[k] is not None))
        if owned:
            raise PydanticCustomError(
                "owned_field", "{keys} {are} set by abbench for every request (exact lengths, "
                "streaming); request_extra cannot change {them}",
                {"keys": ", ".join(owned), "are": "is" if len(owned) == 1 else "are",
                 "them": "it" if len(owned) == 1 else "them"})
        return v


BuildStep = str | list[str]


class SourceConfig(_Frozen):
    """``sources: NAME: {repo, build, artifacts}``: a repository and how to build it
    (:class:`abbench.server.git.Source`)."""

    repo: str = Field(description="a local path (relative to the arms file) or a URL")
    build: str | list[BuildStep] = Field(
        description="one shell string, or a list of steps, each a shell string or an argv "
        "list; placeholders {src}, {build}, {jobs}, {ccache}")
    artifacts: list[str] | dict[str, str] = Field(
        description="paths under {build} the arms use, e.g. [bin/llama-server]; the first "
        "is {bin}")
    env: dict[str, str] = Field(default_factory=dict, description="extra build environment")
    prune: bool = Field(False, description="keep only the artifacts after a build")

    @property
    def steps(self) -> list[BuildStep]:
        return [self.build] if isinstance(self.build, str) else list(self.build)


class GitSpec(_Frozen):
    """``git: {source, ref, revert, cherry_pick}``: an arm built from a commit.
    ``sha`` and ``patch`` are the resolved ids (set at plan time and pinned in
    run.json, never written by hand)."""

    source: str
    ref: str = Field(min_length=1)
    revert: list[str] = Field(default_factory=list)
    cherry_pick: list[str] = Field(default_factory=list)
    sha: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")
    patch: list[tuple[str, str]] | None = None

    @field_validator("ref", mode="before")
    @classmethod
    def _ref_as_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("revert", "cherry_pick", mode="before")
    @classmethod
    def _refs_as_str(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [str(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v]
        return v

    def describe(self) -> str:
        """``master -abc1234 +def5678`` (resolved ids, 7 digits, once pinned)."""
        if self.sha is None:
            return " ".join([self.ref, *(f"-{r}" for r in self.revert),
                             *(f"+{c}" for c in self.cherry_pick)])
        marks = {"revert": "-", "cherry-pick": "+"}
        return " ".join([f"{self.ref} {self.sha[:7]}",
                         *(marks[op] + s[:7] for op, s in self.patch or [])])


class LeaveOneOut(_Frozen):
    arm: str = Field(description="the candidate arm (a git arm)")
    commits: list[str] = Field(min_length=1, description="commits to revert, one arm each")

    @field_validator("commits", mode="before")
    @classmethod
    def _refs_as_str(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [str(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v]
        return v


class Variants(_Frozen):
    leave_one_out: LeaveOneOut | None = None


class ArmConfig(ServerSpec):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", max_length=64)
    label: str | None = Field(None, description="column head, e.g. 'prod ecb52158'")
    commit: str | None = Field(None, description="commit id of the build, shown in ls/history")
    series: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", max_length=64,
                               description="the history series this arm's runs join "
                               "(default: the arm's name)")
    git: GitSpec | None = Field(None, description="build the arm from a commit of a source: "
                                "{source, ref, revert: [..], cherry_pick: [..]}")
    #: the built arm's placeholders ({bin}, {build}, {src}) and its build log; set by
    #: the build before a run, never stored nor part of the config digest
    built: dict[str, str] | None = Field(None, exclude=True)
    #: for a leave-one-out variant: the candidate arm and the commit it reverts
    variant_of: tuple[str, str] | None = None


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
    kind: Literal["decode", "load", "trace", "sessions", "capacity"] = "decode"
    name: str | None = Field(None, description="row name; default 'decode' "
                             "(+ ' + side calls'), or 'load'")
    contexts: list[Context] = Field(default_factory=list, min_length=1)
    decode_tokens: int = Field(128, ge=2)
    side_calls: SideCalls | None = None
    prompt: PromptSource = PromptSource()
    load: LoadSpec | None = Field(None, description="a load workload: concurrency levels "
                                  "or arrival rates (docs/load-workloads.md)")
    slo: Slo | None = Field(None, description="load only: goodput counts requests meeting it")
    trace: TraceSpec | None = Field(None, description="replay a trace file (docs/traffic.md)")
    sessions: SessionsSpec | None = Field(None, description="multi-turn conversations "
                                          "sharing a prefix (docs/traffic.md)")
    capacity: CapacitySpec | None = Field(None, description="the highest concurrency or "
                                          "rate meeting p99 bounds (abbench/config/capacity.py)")

    @model_validator(mode="before")
    @classmethod
    def _kind_from_load(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "kind" not in data:
            for kind in ("load", "trace", "sessions", "capacity"):
                if data.get(kind) is not None:
                    return {**data, "kind": kind}
        return data

    @model_validator(mode="after")
    def _decode_or_load(self) -> Workload:
        if self.replay is not None or self.kind in ("trace", "sessions"):
            if getattr(self, self.kind, None) is None or self.load is not None \
                    or (self.trace is not None and self.sessions is not None):
                raise ValueError(f"kind: {self.kind} takes one {self.kind}: mapping (and no "
                                 "load:, trace: or sessions: beside it)")
            if self.contexts or self.side_calls:
                raise ValueError(f"a {self.kind} workload takes its lengths inside "
                                 f"{self.kind}:, not contexts: or side_calls:")
        elif self.kind == "capacity" or self.capacity is not None:
            if self.capacity is None or self.kind != "capacity" or self.load is not None \
                    or self.contexts or self.side_calls or self.slo is not None:
                raise ValueError("a capacity workload is capacity: alone (its bounds and "
                                 "prompt_tokens: go inside it)")
        elif self.kind == "load":
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
        if self.replay is not None:
            return self.kind
        if self.capacity is not None:
            return "capacity"
        return "decode + side calls" if self.side_calls else "decode"

    @property
    def replay(self) -> TraceSpec | SessionsSpec | None:
        """The trace or sessions spec of a replayed workload, else None."""
        return self.trace if self.trace is not None else self.sessions

    def row_name(self, context: int) -> str:
        """The row id stored with every sample (``workload`` in samples.jsonl): the
        title and the context; the context goes after a first word ``decode``
        (``decode 32K + side calls``, ``decode 32K (128 tok)``), else at the end
        (``decoder 1K``, ``decode-128 1K``)."""
        ctx = format_context(context)
        if self.title == "decode" or self.title.startswith("decode "):
            return f"decode {ctx}{self.title.removeprefix('decode')}"
        return f"{self.title} {ctx}"

    def row_key(self, context: int) -> RowKey:
        return RowKey(self.row_name(context), "", context, self.decode_tokens,
                      self.side_calls is not None)

    def load_row(self, level: LoadLevel) -> str:
        """A load level's row id: ``load c=8``, ``load rate=2/s``."""
        return f"{self.title} {level.label}"

    def row_keys(self) -> list[RowKey]:
        """Every row this workload makes."""
        if self.load is not None:
            return [RowKey(self.load_row(lv), "", self.load.prompt_tokens, self.load.output_tokens)
                    for lv in self.load.levels()]
        if self.sessions is not None:
            return [RowKey(self.title, "", self.sessions.prefix_tokens,
                           self.sessions.output_tokens)]
        if self.trace is not None:
            return [RowKey(self.title)]
        if self.capacity is not None:
            return [RowKey(self.title, "", self.capacity.prompt_tokens,
                           self.capacity.output_tokens)]
        return [self.row_key(c) for c in self.contexts]


def _describe(w: Workload) -> str:
    if w.replay is not None:
        return f"{w.title!r}"
    if w.load is not None:
        return f"{w.title!r}: " + ", ".join(lv.label for lv in w.load.levels())
    if w.capacity is not None:
        return f"{w.title!r}: capacity search"
    ctx = ", ".join(format_context(c) for c in w.contexts)
    return f"{w.title!r}: contexts {ctx}, decode_tokens {w.decode_tokens}"


class Config(_Frozen):
    schema_version: Literal[1] = 1
    arms: list[ArmConfig] = Field(min_length=2, max_length=64)
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
    table: TableConfig = Field(default_factory=TableConfig, description="rows of the PR "
                               "table and their order (metrics: [...])")
    stats: StatsConfig = Field(default_factory=StatsConfig, description="verdicts: alpha, "
                               "noise_band(s); rounds until confident: until_ci, max_rounds")

    # -- collectors (VRAM, RSS, counters, drift signals): fields below this line
    collectors: list[CollectorSettings] = Field(
        default_factory=list, description="extra metrics: vram, rss, prometheus, "
        "response_field, log_regex, drift, flush (abbench/config/collectors.py)")

    sources: dict[str, SourceConfig] = Field(
        default_factory=dict, description="git repositories and build recipes that arms "
        "with git: build from")
    variants: Variants | None = Field(None, description="arms generated from another: "
                                      "leave_one_out: {arm, commits}")

    quality: QualityConfig | None = Field(None, description="quality checks (abbench/quality)")
    fingerprints: FingerprintConfig | None = Field(
        None, description="greedy-output fingerprints of prompt sets (abbench/quality)")
    speculative: SpeculativeConfig | None = Field(
        None, description="speculative-decoding acceptance per prompt set "
        "(abbench/quality/speculative.py)")

    # Set by load_config: where the file was, for relative paths and messages.
    source: str | None = Field(None, exclude=True)

    @field_validator("vars", mode="before")
    @classmethod
    def _vars_as_str(cls, v: Any) -> Any:
        if isinstance(v, Mapping):
            return _scalars_as_text(v, "vars")
        return v

    @model_validator(mode="after")
    def _plan_size(self) -> Config:
        lives = self.rounds * len(self.arms)
        if lives > MAX_SERVER_LIVES:
            raise PydanticCustomError(
                "plan_size", "{rounds} rounds of {arms} arms are {lives} server lives; at most "
                "{most}", {"rounds": self.rounds, "arms": len(self.arms), "lives": f"{lives:,}",
                           "most": f"{MAX_SERVER_LIVES:,}"})
        return self

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
                if key.workload in seen:
                    j = seen[key.workload]
                    raise PydanticCustomError(
                        "duplicate_row",
                        "workloads[{j}] ({a}) and workloads[{i}] ({b}) both make the row "
                        "{row}; give one a name: (e.g. name: {hint}) or other contexts",
                        {"j": j, "i": i, "a": _describe(workloads[j]), "b": _describe(w),
                         "row": repr(key.workload),
                         "hint": f"load-{i}" if w.load else f"decode-{w.decode_tokens}"})
                seen[key.workload] = i
        return workloads

    @model_validator(mode="after")
    def _check_arms(self) -> Config:
        names = [a.name for a in self.arms]
        for i, a in enumerate(self.arms):
            if a.git is not None and a.git.source not in self.sources:
                raise PydanticCustomError(
                    "git_source", "arms[{i}] ({arm}): git.source {src} is not under "
                    "sources: ({known})", {"i": i, "arm": a.name, "src": repr(a.git.source),
                                           "known": ", ".join(self.sources) or "none"})
        loo = self.variants.leave_one_out if self.variants else None
        if loo is not None:
            cand = next((a for a in self.arms if a.name == loo.arm), None)
            if cand is None or cand.git is None:
                raise PydanticCustomError(
                    "variants", "variants.leave_one_out.arm {arm} is not a git arm; git "
                    "arms: {known}", {"arm": repr(loo.arm), "known": ", ".join(
                        a.name for a in self.arms if a.git) or "none"})
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
        raise ConfigError(f"no arm named {clip_repr(name)}",
                          hint=f"arms: {', '.join(self.arm_names)}")

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
                               "{{ and }} for literal braces") from None
    except (ValueError, IndexError) as e:
        raise ConfigError(f"bad placeholder syntax in {clip_repr(template)}: {e}", where=where,
                          hint="placeholders look like {port}; write {{ and }} for literal "
                               "braces") from None


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
                               "'{port}'], here or under defaults:")
    shell = bool(pick("shell"))
    if shell:
        argv = [start if isinstance(start, str) else shlex.join(start)]
    else:
        try:
            argv = shlex.split(start) if isinstance(start, str) else [str(s) for s in start]
        except ValueError as e:  # an unbalanced quote
            raise ConfigError(f"cannot be split into arguments: {e}", where=f"{where}.start",
                              hint="close the quote, or give start: as an argv list") from None
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
    ``$NAME`` (not expanded: only ``${NAME}`` is), two arms with one label, a seed that
    changes nothing, request fields that make decodes non-greedy."""
    src = cfg.source or "arms file"
    out: list[str] = []

    def bare(where: str, text: str) -> None:
        m = _BARE_VAR.search(text)
        if m:
            out.append(f"{where}: ${clip(m.group(1), 40)} is not expanded (only "
                       f"${{{clip(m.group(1), 40)}}} is taken from the environment)")

    for k, v in cfg.vars.items():
        bare(f"{src}: vars.{clip(k, 40)}", v)
    arms = cfg.resolved_arms()
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
    labels = [a.label for a in arms]
    for label in sorted({x for x in labels if labels.count(x) > 1}):
        names = ", ".join(a.name for a in arms if a.label == label)
        out.append(f"{src}: arms {names} share the label {clip_repr(label, 60)}: their "
                   "columns and history series cannot be told apart")
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
        for k in node:
            if isinstance(k, str) and "${" in k:
                line = (lines or {}).get((*path, k))
                at = f"line {line}, " if line else ""
                raise ConfigError(f"{at}{_fmt_loc((*path, k))}: ${{...}} is expanded in values, "
                                  "not in keys", where=src,
                                  hint="write the key out; put the variable in its value")
        return {k: _expand_tree(v, (*path, k), src, lines) for k, v in node.items()}
    return node


def _written_numbers(root: yaml.Node | None) -> dict[tuple[Any, ...], str]:
    """Each plain number or boolean of the document as written (``010``, ``0.10``,
    ``on``), by path."""
    out: dict[tuple[Any, ...], str] = {}
    numbers = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")

    def walk(node: yaml.Node, path: tuple[Any, ...], depth: int) -> None:
        if depth > 8:  # only the top levels hold vars: and env:
            return
        if isinstance(node, yaml.ScalarNode) and node.tag in numbers:
            out[path] = node.value
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                walk(v, (*path, k.value), depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i), depth + 1)

    if root is not None:
        walk(root, (), 0)
    return out


def _text_as_written(data: dict[str, Any], root: yaml.Node | None) -> dict[str, Any]:
    """``vars:`` and ``env:`` values that YAML read as numbers, as they were written
    (``X: 010`` is "010", not "8"; ``0.10`` is "0.10", not "0.1")."""
    written = _written_numbers(root)

    def fix(mapping: Any, path: tuple[Any, ...]) -> Any:
        if not isinstance(mapping, dict):
            return mapping
        return {k: written.get((*path, k), v) if isinstance(v, (int, float))
                and not isinstance(v, bool) else v for k, v in mapping.items()}

    def fix_start(spec: Any, path: tuple[Any, ...]) -> Any:
        """``start: [-c, 8192, -fa, on]``: the items YAML read as numbers or booleans,
        as the text they stand for ("8192", "on")."""
        if not isinstance(spec, dict) or not isinstance(spec.get("start"), list):
            return spec
        items = [written.get((*path, "start", i), v) if isinstance(v, (int, float)) else v
                 for i, v in enumerate(spec["start"])]
        return {**spec, "start": items}

    data = dict(data)
    if isinstance(data.get("defaults"), dict):
        data["defaults"] = fix_start(data["defaults"], ("defaults",))
    if isinstance(data.get("arms"), list):
        data["arms"] = [fix_start(a, ("arms", i)) for i, a in enumerate(data["arms"])]
    if "vars" in data:
        data["vars"] = fix(data["vars"], ("vars",))
    if isinstance(data.get("defaults"), dict) and "env" in data["defaults"]:
        data["defaults"] = {**data["defaults"], "env": fix(data["defaults"]["env"],
                                                           ("defaults", "env"))}
    if isinstance(data.get("arms"), list):
        data["arms"] = [{**a, "env": fix(a["env"], ("arms", i, "env"))}
                        if isinstance(a, dict) and "env" in a else a
                        for i, a in enumerate(data["arms"])]
    return data


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        name = clip(part, 60)
        out += f"[{part}]" if isinstance(part, int) else (f".{name}" if out else name)
    return out or "(top level)"


def _line_map(root: yaml.Node | None) -> dict[tuple[Any, ...], int]:
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

    if root is not None:
        walk(root, ())
    return lines


def _compose(text: str) -> yaml.Node | None:
    """The node tree of ``text`` (for line numbers), or None when it does not parse."""
    try:
        return load_yaml(text, where="")[1]
    except ConfigError:
        return None


#: problems of one file listed in its message before the rest are counted
MOST_PROBLEMS = 3

_HINTS = {
    "extra_forbidden": f"remove it or check its spelling; {README_ARMS} lists every field",
    "missing": f"add it; {README_ARMS} shows an example",
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
    "value_error": f"see the message; {README_ARMS} documents each field",
    "baseline": "set baseline: to one of the arm names, or leave it out (the first arm)",
    "bool_type_here": "write the value itself; quote text that YAML would read as a boolean",
    "finite_number": "write a finite number (not .inf or .nan)",
    "text_value": "quote the value",
    "env_name": "environment variable names are letters, digits and _",
    "host": "write e.g. 127.0.0.1, ::1 or localhost; the port goes in port:",
    "endpoint_path": "start it with /, e.g. /health or /v1/completions",
    "owned_field": "remove it from request_extra: abbench sets it",
    "nul": "remove the NUL character (\\0)",
    "plan_size": "split the campaign over several runs",
    "too_long": "split the arms over several files",
    "start_mapping": "quote placeholders in start: lists: '{port}'",
    "git_source": "name a source of sources:, or add it there (repo, build, artifacts)",
    "variants": "name an arm that has git: {source, ref}",
}

# pydantic names the member of a union that failed ("int", "literal['auto']"):
# not a field, left out of the field path.
_UNION_TAGS = {"int", "str", "float", "bool", "list", "dict", "constrained-int"}


def config_from_data(data: Any, *, source: str, text: str = "",
                     root: yaml.Node | None = None) -> Config:
    """A :class:`Config` of YAML ``data`` (``root``, or else ``text``, gives the lines
    for messages)."""
    if not isinstance(data, dict):
        raise ConfigError("the file must be a YAML mapping (arms:, workloads:, ...)", where=source,
                          hint="see arms/llama-cpu.yaml for an example")
    root = root if root is not None else _compose(text) if text else None
    lines = _line_map(root)
    data = _text_as_written(_expand_tree(data, (), source, lines), root)
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
        raw = err["loc"]
        loc = tuple(p for i, p in enumerate(raw) if not (isinstance(p, str) and (
            "[" in p or p.startswith("function") or p in _UNION_TAGS
            or (i >= 2 and raw[i - 2] == "collectors" and isinstance(raw[i - 1], int)))))
        if err["type"] == "baseline":
            loc = ("baseline",)
        if err["type"] in ("git_source", "variants"):
            loc = ("arms",) if err["type"] == "git_source" else ("variants",)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown key {clip_repr(loc[-1], 60)}"
            near = did_you_mean(loc[-1], fields_at(Config, loc))
            if near is not None:
                msg += f" (did you mean {near!r}?)"
                hint = hint or f"rename it to {near}: ({README_ARMS} lists every field)"
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
    if len(msgs) > MOST_PROBLEMS:  # the first ones say enough
        msgs = [*msgs[:MOST_PROBLEMS], f"and {len(msgs) - MOST_PROBLEMS} more problem(s)"]
    return ConfigError("; ".join(msgs), where=source,
                       hint=hint or f"fix the field named; {README_ARMS} documents each field")


def prompt_text(cfg: Config, index: int,
                lines: dict[tuple[Any, ...], int] | None = None) -> str | None:
    """The text of workload ``index``'s prompt file (None for filler), read with the
    caps of every input file; refused when it holds no text."""
    w = cfg.workloads[index]
    if w.prompt.source != "file" or not w.prompt.path:
        return None
    p = Path(w.prompt.path)
    p = p if p.is_absolute() else cfg.base_dir / p
    loc = ("workloads", index, "prompt", "path")
    line = (lines or {}).get(loc) or (lines or {}).get(loc[:3])
    where = f"{cfg.source or 'arms file'}: {f'line {line}, ' if line else ''}{_fmt_loc(loc)}"
    label = f"the prompt file {clip_repr(str(p))}"
    hint = "give a text file, relative to the arms file"
    if w.prompt.path.startswith("~"):
        hint += " (~ is not expanded: write ${HOME}/...)"
    text = read_text(p, limit=PROMPT_TEXT_MAX, where=where, label=label, hint=hint,
                     kind="a prompt file")
    if not text.strip():
        raise ConfigError(f"{label} holds no text", where=where, hint=hint)
    return text


def _check_files(cfg: Config, src: str, lines: dict[tuple[Any, ...], int]) -> None:
    """Files the config names that must be readable before a run (prompt texts)."""
    for i in range(len(cfg.workloads)):
        prompt_text(cfg, i, lines)


def load_config(path: str | os.PathLike[str]) -> Config:
    p = Path(path)
    src = str(p)
    text = read_text(p, limit=ARMS_FILE_MAX, where=src, kind="an arms file",
                     hint="give the path of an arms file, e.g. arms/llama-cpu.yaml")
    data, root = load_yaml(text, where=src)
    if data is None:
        raise ConfigError("the file is empty", where=src,
                          hint="see arms/llama-cpu.yaml for an example")
    cfg = config_from_data(data, source=src, root=root)
    cfg.resolved_arms()  # resolves presets and start commands: fail early
    _check_files(cfg, src, _line_map(root))
    remember(config_secret_values(cfg))  # hidden in everything abbench writes from now
    return cfg


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: ("***" if is_secret_name(k) and v else v) for k, v in env.items()}


def config_secret_values(cfg: Config) -> list[str]:
    """Secret values a config can carry: its env and vars, and the environment's
    (``${HF_TOKEN}`` expands into start commands)."""
    envs: list[Mapping[str, str]] = [os.environ, cfg.vars, cfg.defaults.env or {}]
    envs += [a.env or {} for a in cfg.arms]
    found = environment_secrets(*envs)
    for arm in cfg.resolved_arms():
        found += argv_secrets(arm.argv) + nested_secrets(arm.request_extra)
        found += environment_secrets(arm.env)
    return sorted(set(found), key=len, reverse=True)


def config_for_storage(cfg: Config) -> dict[str, Any]:
    """The resolved config as stored with a run, secrets redacted."""
    data = cfg.model_dump(mode="json", exclude_none=True)
    for arm in data.get("arms", []):
        if "env" in arm:
            arm["env"] = redact_env(arm["env"])
    if "env" in data.get("defaults", {}):
        data["defaults"]["env"] = redact_env(data["defaults"]["env"])
    data["vars"] = redact_env(data.get("vars", {}))
    if not data.get("sources"):  # the digest of a file without git arms is unchanged
        data.pop("sources", None)
    # cpus/nice only when set: the stored config (and its digest, which resume checks)
    # of an arms file without them is what it was before they existed
    data["resolved_arms"] = [
        {**a.model_dump(mode="json", exclude={k for k in ("cpus", "nice", "git")
                                              if getattr(a, k) is None}),
         "env": redact_env(a.env)} for a in cfg.resolved_arms()
    ]
    return scrub(data, config_secret_values(cfg))
