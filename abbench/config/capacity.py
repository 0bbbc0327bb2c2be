"""``capacity:`` in a workload: the highest load meeting latency bounds, per server life."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from abbench.config.frozen import Frozen

Bound = Annotated[float, Field(gt=0)]


class CapacitySpec(Frozen):
    """A bracketing search inside each server life for the highest concurrency (or
    arrival rate) whose p99 latencies meet every bound given: the range's low end
    first, then doubling until a level fails, then halving the gap between the last
    level that met the bounds and the first that did not, until it is at most
    ``resolution`` (abbench/workload/capacity_search.py)."""

    concurrency: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None = Field(
        None, description="[low, high]: closed-loop concurrency range searched")
    rate: tuple[Bound, Bound] | None = Field(
        None, description="[low, high]: open-loop Poisson arrival rates searched (req/s)")
    resolution: Bound = Field(1, description="the search stops when the highest level "
                              "meeting the bounds and the lowest failing one are this close")
    ttft_p99_ms: Bound | None = Field(None, description="bound on p99 time to first token")
    itl_p99_ms: Bound | None = Field(None, description="bound on p99 inter-token latency")
    e2e_p99_ms: Bound | None = Field(None, description="bound on p99 end-to-end latency")
    requests: int = Field(32, ge=4, description="measured requests per level (at least "
                          "2 x concurrency are sent, so every slot serves twice)")
    warmup: int | None = Field(None, ge=0, description="requests sent first at each level "
                               "and left out; default the level's concurrency (rate: 1)")
    prompt_tokens: int = Field(128, ge=2, description="exact prompt length of every request")
    output_tokens: int = Field(32, ge=2, description="exact output length of every request")
    max_levels: int = Field(16, ge=2, le=64, description="levels probed at most per life")
    timeout: float = Field(600.0, gt=0, description="seconds the search may take per life")

    @model_validator(mode="before")
    @classmethod
    def _one_range(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if (data.get("concurrency") is None) == (data.get("rate") is None):
                raise ValueError("capacity: needs exactly one of concurrency: [low, high] "
                                 "and rate: [low, high]")
            if not any(data.get(k) is not None for k in ("ttft_p99_ms", "itl_p99_ms",
                                                           "e2e_p99_ms")):
                raise ValueError("capacity: needs at least one bound: ttft_p99_ms, "
                                 "itl_p99_ms or e2e_p99_ms")
        return data

    @model_validator(mode="after")
    def _ordered(self) -> CapacitySpec:
        lo, hi = self.range
        if lo >= hi:
            raise ValueError(f"capacity range [{lo:g}, {hi:g}]: low must be below high")
        if self.concurrency is not None and self.resolution != int(self.resolution):
            raise ValueError("capacity: a concurrency search's resolution is a whole number")
        return self

    @property
    def range(self) -> tuple[float, float]:
        lo, hi = self.concurrency if self.concurrency is not None else self.rate or (0, 0)
        return float(lo), float(hi)

    @property
    def by_rate(self) -> bool:
        return self.rate is not None

    def bounds(self) -> dict[str, float]:
        """metric of abbench/model/load_window.py -> its bound (ms)."""
        pairs = (("load_ttft_p99_ms", self.ttft_p99_ms), ("load_itl_p99_ms", self.itl_p99_ms),
                 ("load_e2e_p99_ms", self.e2e_p99_ms))
        return {k: v for k, v in pairs if v is not None}
