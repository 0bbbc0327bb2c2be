"""What a workload measures: prompts, side calls, arrivals, load levels, SLOs,
and the workload itself with its row keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from abbench.config.capacity import CapacitySpec
from abbench.config.traffic import SessionsSpec, TraceSpec
from abbench.config.values import Context, _Frozen, format_context
from abbench.model.rows import RowKey

#: the most tokens (prompt plus decode) one request may ask for
MAX_REQUEST_TOKENS = 16 * 1024 * 1024

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
    def _fits_a_context(self) -> Workload:
        """A prompt plus its decode that no server's context holds (16M tokens: several
        times the longest context windows served today) is a typo, not a plan."""
        if self.contexts and max(self.contexts) + self.decode_tokens > MAX_REQUEST_TOKENS:
            raise ValueError(
                f"contexts up to {max(self.contexts):,} plus decode_tokens "
                f"{self.decode_tokens:,} make a request of more than {MAX_REQUEST_TOKENS:,} "
                "tokens, which no server's context holds; check the numbers")
        return self

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
