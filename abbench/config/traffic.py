"""``trace:`` and ``sessions:`` workloads: replayed traffic with a designed cache state.

docs/traffic.md describes both; abbench/workload/trace.py reads the files and
abbench/workload/sessions.py replays them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from abbench.config.frozen import Frozen, parse_context
from abbench.errors import clip_repr

Tokens = Annotated[int, BeforeValidator(parse_context)]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_seconds(v: Any) -> Any:
    """``90`` / ``"90s"`` / ``"10m"`` / ``"1h"`` / ``"500ms"`` -> seconds."""
    if isinstance(v, str):
        m = _DURATION.match(v)
        if not m:
            raise ValueError(f"{clip_repr(v, 40)} is not a duration: write e.g. 90s, 10m, 1h")
        return float(m.group(1)) * {"ms": 1e-3, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    return v


def parse_speed(v: Any) -> Any:
    """``2`` / ``"2x"`` -> 2.0 (arrivals twice as fast)."""
    if isinstance(v, str):
        text = v.strip().lower()
        try:
            return float(text[:-1] if text.endswith("x") else text)
        except ValueError:
            raise ValueError(f"{clip_repr(v, 40)} is not a speed: write e.g. 2x or 0.5x") \
                from None
    return v


Seconds = Annotated[float, BeforeValidator(parse_seconds), Field(ge=0)]
CacheState = Literal["cold", "warm", "as-is"]


class Replay(Frozen):
    """What every replayed workload takes."""

    cache: CacheState = Field("cold", description="cold: the prefix cache flushed before "
                              "each replay (vLLM /reset_prefix_cache, SGLang /flush_cache; "
                              "llama.cpp: each server life starts empty); warm: the shared "
                              "prefixes sent first; as-is: nothing done")
    tolerance: float = Field(0.10, ge=0, le=1, description="largest gap between the designed "
                             "and the measured cache hit rate (shares of prompt tokens) "
                             "before the row says so")
    steady: tuple[float, float] = Field((0.1, 0.9), description="the steady-state window: "
                                        "the requests in this span of the planned send order "
                                        "(0 first, 1 last) make the row; ramp-up and drain "
                                        "are left out")
    seed: int | None = Field(None, ge=0, description="token blocks' seed; default the run's "
                             "(the same traffic for every arm and round)")
    concurrency: int | None = Field(None, ge=1, description="cap on conversations in "
                                    "flight (a Mooncake request is its own); a new one waits")
    workers: int = Field(1, ge=1, le=64, description="client processes, each its own event "
                         "loop with its share of the conversations: one holds about 40,000 "
                         "streamed tokens/s per core (docs/client-bench.md)")
    timeout: Seconds = Field(600.0, gt=0, description="seconds one replay may take; "
                             "requests still running then are cut")

    @model_validator(mode="after")
    def _steady(self) -> Replay:
        a, b = self.steady
        if not 0 <= a < b <= 1:
            raise ValueError("steady: is [start, end] with 0 <= start < end <= 1, "
                             f"got [{a:g}, {b:g}]")
        return self


class TraceSpec(Replay):
    """Replay of a trace file (Mooncake or sessions JSONL)."""

    file: str = Field(description="the trace (JSONL); relative to the arms file")
    format: Literal["mooncake", "sessions"] = "mooncake"
    block_tokens: Tokens = Field(512, description="tokens per hash_id block (Mooncake: 512)")
    speed: Annotated[float, BeforeValidator(parse_speed), Field(gt=0)] = Field(
        1.0, description="arrivals this many times as fast (2x: half the gaps)")
    first: Annotated[float | None, BeforeValidator(parse_seconds)] = Field(
        None, description="only sessions that start in this first span (10m, 90s)")

    def describe(self) -> str:
        first = "" if self.first is None else f", the first {self.first:g} s"
        return (f"replay of {self.file} ({self.format}, {self.block_tokens}-token blocks, "
                f"speed {self.speed:g}x{first}), cache {self.cache}, {self.workers} client "
                "process(es)")

    @field_validator("file")
    @classmethod
    def _file(cls, v: str) -> str:
        if not v.strip() or "\0" in v:
            raise ValueError("file: names the trace file (JSONL)")
        return v


class SessionsSpec(Replay):
    """N conversations sharing a prefix, T turns each (made by the trace generator)."""

    count: int = Field(16, ge=1, le=100_000, description="conversations")
    prefix_tokens: Tokens = Field(2048, description="prefix every conversation shares "
                                  "(system prompt plus repository)")
    turns: int = Field(4, ge=1, le=1000)
    user_tokens: Tokens = Field(256, description="tokens each turn appends")
    output_tokens: int = Field(64, ge=2, description="tokens each turn asks for")
    think: Seconds = Field(1.0, description="mean think time between turns (exponential)")
    rate: float = Field(1.0, gt=0, description="conversations started per second (Poisson)")
    side_share: float = Field(0.0, ge=0, le=1, description="share of turns that also send "
                              "a side call")
    side_tokens: Tokens = 64
    side_output: int = Field(8, ge=2)

    def describe(self) -> str:
        side = f", side calls after {self.side_share:.0%} of turns" if self.side_share else ""
        return (f"{self.count} conversations x {self.turns} turns, {self.prefix_tokens}-token "
                f"shared prefix, +{self.user_tokens} tokens and {self.output_tokens} out a "
                f"turn, {self.rate:g}/s, think {self.think:g} s{side}, cache {self.cache}")
