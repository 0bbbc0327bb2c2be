"""arms.yaml: typed, frozen, validated.

``load_config(path)`` reads the file, expands ``${ENV}`` references, validates it
with pydantic and returns a :class:`Config`. Every error is a :class:`ConfigError`
naming the file, the line and field, and what to do."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from abbench import registry
from abbench.config.collectors import CollectorSettings
from abbench.config.frozen import endpoint_path
from abbench.config.quality import FingerprintConfig, QualityConfig, SpeculativeConfig
from abbench.config.stats import StatsConfig, TableConfig
from abbench.config.values import (
    _LENGTH_FIELDS,
    _OWNED_FIELDS,
    _Frozen,
    _scalars_as_text,
    parse_cpus,
)
from abbench.config.workloads import Workload, _describe
from abbench.errors import ConfigError, clip_repr

SCHEMA_VERSION = 1

#: rounds x arms of one arms file (each is a server start)
MAX_SERVER_LIVES = 100_000


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



def check_until_ci_cap(stats: StatsConfig, rounds: int) -> None:
    """--until-ci adds rounds up to ``max_rounds``: a cap below the planned rounds
    contradicts them (the run would plan more rounds than it may take)."""
    if stats.until_ci is not None and stats.max_rounds is not None \
            and stats.max_rounds < rounds:
        raise ValueError(f"stats.max_rounds {stats.max_rounds} is below rounds {rounds}: "
                         "--until-ci adds rounds up to the cap; raise max_rounds (or "
                         "--max-rounds) to at least the planned rounds, or plan fewer")

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

    @field_validator("vars")
    @classmethod
    def _vars_as_written(cls, v: dict[str, str]) -> dict[str, str]:
        """A var goes into start: as written: a placeholder inside one (``x: "{x}"``, a
        var defined by itself or by another) would reach the server unexpanded."""
        for name, value in v.items():
            try:
                fields = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
            except ValueError:
                continue  # its syntax is reported where it is used
            if fields:
                itself = " (itself)" if fields[0] == name else ""
                raise ValueError(
                    f"vars.{name} uses {{{fields[0]}}}{itself}: a var is put into start: as "
                    "written, placeholders inside vars are not expanded; write the value "
                    "itself, or {{ and }} for literal braces")
        return v

    @model_validator(mode="after")
    def _until_ci_cap(self) -> Config:
        check_until_ci_cap(self.stats, self.rounds)
        return self

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

