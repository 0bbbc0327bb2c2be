"""Every metric abbench records: its label, unit, direction and format.

Declared here, in one place, and never registered as an import side effect: a
stored run renders the same whatever was imported. A metric of the user's own (a
collector's ``name:``) travels with its records (``spec`` in each record), and
:func:`catalogue` reads it back from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from abbench.model.records import CollectorSample, Record

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


_DECLARED = (
    # the workload's own, per request
    MetricSpec("decode_tok_s", "decode", "tok/s", "higher"),
    MetricSpec("side_call_ms", "side-call latency", "ms", "lower", 1, table=False),
    MetricSpec("ttft_ms", "TTFT", "ms", "lower", 1, table=False),
    MetricSpec("prefill_tok_s", "prefill", "tok/s", "higher", 1, table=False),
    MetricSpec("server_decode_tok_s", "decode (server timings)", "tok/s", "higher", table=False),
    MetricSpec("server_prefill_tok_s", "prefill (server timings)", "tok/s", "higher", 1,
               table=False),
    # load workloads, per (arm, round, level): abbench/model/load_window.py defines each
    MetricSpec("load_output_tok_s", "output", "tok/s", "higher", 1),
    MetricSpec("load_req_s", "requests", "req/s", "higher", 2, table=False),
    MetricSpec("load_ttft_p50_ms", "TTFT p50", "ms", "lower", 1, table=False),
    MetricSpec("load_ttft_p90_ms", "TTFT p90", "ms", "lower", 1, table=False),
    MetricSpec("load_ttft_p99_ms", "TTFT p99", "ms", "lower", 1),
    MetricSpec("load_itl_p50_ms", "ITL p50", "ms", "lower", 2, table=False),
    MetricSpec("load_itl_p90_ms", "ITL p90", "ms", "lower", 2, table=False),
    MetricSpec("load_itl_p99_ms", "ITL p99", "ms", "lower", 2, table=False),
    MetricSpec("load_e2e_p50_ms", "end-to-end p50", "ms", "lower", 1, table=False),
    MetricSpec("load_e2e_p90_ms", "end-to-end p90", "ms", "lower", 1, table=False),
    MetricSpec("load_e2e_p99_ms", "end-to-end p99", "ms", "lower", 1, table=False),
    MetricSpec("load_goodput", "goodput share", "", "higher", 3),
    MetricSpec("load_goodput_req_s", "goodput", "req/s", "higher", 2, table=False),
    MetricSpec("load_failed", "failed requests", "", "lower", 0, table=False),
    # trace and sessions replays (abbench/workload/sessions.py): TTFT of first turns
    # (cold) and later turns (warm), the server's cache hit rate, misses per output token
    *(MetricSpec(f"trace_ttft_{turn}_p{q}_ms", f"TTFT {turn} turns p{q}", "ms", "lower", 1,
                 table=q == 90) for turn in ("first", "later") for q in (50, 90, 99)),
    MetricSpec("trace_hit_rate", "cache hit rate", "", "higher", 3),
    MetricSpec("trace_designed_hit_rate", "designed cache hit rate", "", "higher", 3,
               table=False),
    MetricSpec("trace_misses_per_token", "prompt misses/token", "", "lower", 2),
    # start-up, per server life (row "server"): abbench/server/startup.py
    MetricSpec("startup_s", "start to ready", "s", "lower", 2, table=False),
    MetricSpec("first_ttft_ms", "first request's TTFT", "ms", "lower", 1, table=False),
    # capacity under an SLA, per server life: abbench/workload/capacity_search.py
    MetricSpec("capacity_max_concurrency", "max concurrency meeting the SLA", "", "higher", 0),
    MetricSpec("capacity_max_rate", "max rate meeting the SLA", "req/s", "higher", 2),
    MetricSpec("capacity_output_tok_s", "output at capacity", "tok/s", "higher", 1,
               table=False),
    # speculative decoding, per prompt set: abbench/quality/speculative.py defines each
    MetricSpec("spec_accept_rate", "acceptance", "", "higher", 3),
    MetricSpec("spec_accept_len", "mean accepted length", "tok", "higher", 2),
    MetricSpec("spec_drafted_per_token", "drafted/token", "", "lower", 2),
    # collectors
    MetricSpec("peak_vram_mib", "peak VRAM", "MiB", "lower", 0),
    MetricSpec("device_vram_mib", "peak device VRAM", "MiB", "lower", 0),
    MetricSpec("peak_rss_mib", "peak RSS", "MiB", "lower", 0),
    MetricSpec("misses_per_token", "misses/token", "", "lower", 2),
    # quality
    MetricSpec("quality", "quality score", "", "higher", 0, denominator="quality_total"),
    MetricSpec("quality_total", "quality items", "", "higher", 0, table=False),
    MetricSpec("quality_command", "quality score (command)", "", "higher", 0,
               denominator="quality_command_total"),
    MetricSpec("quality_command_total", "quality items (command)", "", "higher", 0,
               table=False),
)

#: the built-in metrics, by name (read-only)
METRICS: Mapping[str, MetricSpec] = MappingProxyType({s.name: s for s in _DECLARED})


def neutral(name: str, label: str | None = None, unit: str = "",
            direction: str = "higher") -> MetricSpec:
    """The spec of a metric abbench does not declare (a counter of the user's own)."""
    return MetricSpec(name, label or name.replace("_", " "), unit,
                      "lower" if direction == "lower" else "higher")


def spec(name: str, known: Mapping[str, MetricSpec] | None = None) -> MetricSpec:
    """The spec of ``name``: from ``known`` (see :func:`catalogue`), else built-in, else
    a neutral one."""
    return (known or METRICS).get(name) or METRICS.get(name) or neutral(name)


def catalogue(records: Iterable[Record]) -> dict[str, MetricSpec]:
    """The built-in specs plus those that collector records carry, so that a report
    rebuilt from a stored run labels a metric of the user's own as the run did."""
    out = dict(METRICS)
    for r in records:
        sp = r.spec if isinstance(r, CollectorSample) else None
        if sp and sp.get("name") and str(sp["name"]) not in out:
            label = sp.get("label")
            out[str(sp["name"])] = neutral(str(sp["name"]), None if label is None else str(label),
                                           str(sp.get("unit", "")),
                                           str(sp.get("direction", "higher")))
    return out
