"""Every metric abbench records: its label, unit, direction and format.

Collectors register their metrics here too, so the report and the statistics
treat a VRAM row exactly like a tok/s row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class MetricSpec:
    name: str
    label: str
    unit: str
    direction: Direction
    digits: int = 2
    #: shown as a table row (others appear in report.json and the details)
    table: bool = True
    #: a score: the value counts passed items out of this metric's value (per round),
    #: and the table shows "P/T" with the change in passed items
    denominator: str | None = None

    def fmt(self, v: float) -> str:
        return f"{v:.{self.digits}f}"


METRICS: dict[str, MetricSpec] = {}


def register(spec: MetricSpec) -> MetricSpec:
    METRICS[spec.name] = spec
    return spec


for _spec in (
    MetricSpec("decode_tok_s", "decode", "tok/s", "higher"),
    MetricSpec("side_call_ms", "side-call latency", "ms", "lower", 1, table=False),
    MetricSpec("ttft_ms", "TTFT", "ms", "lower", 1, table=False),
    MetricSpec("prefill_tok_s", "prefill", "tok/s", "higher", 1, table=False),
    MetricSpec("server_decode_tok_s", "decode (server timings)", "tok/s", "higher", table=False),
    MetricSpec("server_prefill_tok_s", "prefill (server timings)", "tok/s", "higher", 1,
               table=False),
):
    register(_spec)


def spec(name: str) -> MetricSpec:
    """The spec of ``name``; unknown metrics (a custom counter) get a neutral one."""
    return METRICS.get(name) or MetricSpec(name, name.replace("_", " "), "", "higher",
                                           table=True)
