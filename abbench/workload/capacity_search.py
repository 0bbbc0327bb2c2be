"""Capacity under an SLA: the highest concurrency (or arrival rate) whose p99 latencies
meet the bounds, searched inside one server life.

The search brackets, then bisects: the range's low end first (if it fails, nothing in
the range meets the bounds); then doubling (concurrency 1, 2, 4, ... or rate r, 2r,
...; the range's high end at most) until a level fails; then the midpoint of the last
level that met the bounds and the first that failed, until the two are at most
``resolution`` apart. It assumes what every server shows below saturation: a level
that meets the bounds has every lower level meeting them too. Each level is one load
window (abbench/workload/load.py): its warm-up, then ``requests`` measured requests
(at least twice the concurrency), percentiles as the load workload defines them; a
level meets the bounds when every measured request succeeded and each bounded p99 is
at most its bound.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from abbench.config.capacity import CapacitySpec
from abbench.config.workloads import Arrival, LoadLevel, LoadSpec, Workload
from abbench.errors import Interrupted
from abbench.model.records import At, CapacityLevel, DecodeSample, LoadRequest, Record
from abbench.workload.decode import Client, PromptMaker
from abbench.workload.load import LevelOutcome, level_arrivals, measure_level

_LABELS = {"load_ttft_p99_ms": "TTFT p99", "load_itl_p99_ms": "ITL p99",
           "load_e2e_p99_ms": "end-to-end p99"}


@dataclass
class Bracket:
    """Where a search ended: the highest level that met the bounds (None: not even the
    lowest), the lowest that did not (None: not even the highest failed), every level
    tried in order with its verdict, and whether the gap reached the resolution."""

    good: float | None
    bad: float | None
    tried: list[tuple[float, bool]] = field(default_factory=list)
    resolved: bool = True


def bracket(lo: float, hi: float, resolution: float, meets: Callable[[float], bool], *,
            whole: bool, max_levels: int) -> Bracket:
    """The bracketing search over [lo, hi] with ``meets`` as the oracle (see the module)."""
    tried: list[tuple[float, bool]] = []
    seen: dict[float, bool] = {}

    def ask(x: float) -> bool:
        if x not in seen:
            seen[x] = meets(x)
            tried.append((x, seen[x]))
        return seen[x]

    if not ask(lo):
        return Bracket(None, lo, tried)
    good, bad = lo, None
    while bad is None and good < hi:
        if len(tried) >= max_levels:
            return Bracket(good, None, tried, resolved=False)
        nxt = min(good * 2, hi)
        if ask(nxt):
            good = nxt
        else:
            bad = nxt
    while bad is not None and bad - good > resolution:
        if len(tried) >= max_levels:
            return Bracket(good, bad, tried, resolved=False)
        mid = (good + bad) // 2 if whole else (good + bad) / 2
        if ask(mid):
            good = mid
        else:
            bad = mid
    return Bracket(good, bad, tried)


def judge(out: LevelOutcome, bounds: dict[str, float]) -> tuple[bool, str | None]:
    """Whether a level met every bound, and why not."""
    if not out.valid:
        return False, f"the level failed: {out.reason}"
    failed = out.metrics.get("load_failed") or 0
    if failed:
        return False, f"{failed:.0f} requests failed"
    over = []
    for metric, bound in bounds.items():
        v = out.metrics.get(metric)
        if v is None:
            return False, f"{_LABELS[metric]} was not measured"
        if v > bound:
            over.append(f"{_LABELS[metric]} {v:.1f} ms > {bound:g} ms")
    return (not over), "; ".join(over) or None


def level_of(spec: CapacitySpec, value: float) -> tuple[Workload, LoadLevel]:
    """One probed level as a load workload of a single level."""
    common: dict[str, Any] = {"prompt_tokens": spec.prompt_tokens,
                              "output_tokens": spec.output_tokens, "warmup": spec.warmup,
                              "timeout": spec.timeout}
    if spec.by_rate:
        load = LoadSpec(arrival=Arrival(rate=[value]), requests=spec.requests, **common)
        # the level's index seeds its arrival times: the same rate, the same times
        return Workload(name="capacity", load=load), LoadLevel(round(value * 1000), None, value)
    c = int(value)
    load = LoadSpec(concurrency=[c], requests=max(spec.requests, 2 * c), **common)
    return Workload(name="capacity", load=load), LoadLevel(0, c, None)


def per_user_tok_s(metrics: dict[str, float]) -> float | None:
    """Output tokens per second one user sees: 1000 / ITL p50 (ms)."""
    itl = metrics.get("load_itl_p50_ms")
    return 1000.0 / itl if itl else None


def run_capacity(client: Client, prompts: PromptMaker, workload: Workload, *, base: At,
                 run_seed: int, w_index: int, record: Callable[[Record], None],
                 record_many: Callable[[list[Record]], None],
                 stop_event: threading.Event | None = None) -> DecodeSample:
    """Search one server life; store every level as it ends; return the answer's sample
    (row ``workload.title``), for the caller to store."""
    spec = workload.capacity
    assert spec is not None
    row = workload.title
    bounds = spec.bounds()
    deadline = time.perf_counter() + spec.timeout
    step = 0
    outcomes: dict[float, LevelOutcome] = {}

    def meets(value: float) -> bool:
        nonlocal step
        w, level = level_of(spec, value)
        assert w.load is not None
        times = level_arrivals(w.load, level, run_seed, base["round"], w_index, 0)
        out = measure_level(client, prompts, w, level, times=times,
                            time_left=deadline - time.perf_counter(), stop_event=stop_event)
        if stop_event is not None and stop_event.is_set():
            raise Interrupted("interrupted")
        ok, why = judge(out, bounds)
        common = {**base, "workload": row, "level": level.label,
                  "concurrency": level.concurrency, "rate": level.rate}
        record_many([LoadRequest.model_validate({**common, "type": "load_request", **r,
                                                 "rep": 0}) for r in out.requests])
        metrics = {k: v for k, v in out.metrics.items() if math.isfinite(v)}
        pu = per_user_tok_s(metrics)
        if pu is not None:
            metrics["per_user_tok_s"] = pu
        record(CapacityLevel(**base, workload=row, step=step, concurrency=level.concurrency,
                             rate=level.rate, meets=ok, why=why, metrics=metrics))
        outcomes[value] = out
        step += 1
        return ok

    lo, hi = spec.range
    found = bracket(lo, hi, spec.resolution, meets, whole=not spec.by_rate,
                    max_levels=spec.max_levels)
    name = "capacity_max_rate" if spec.by_rate else "capacity_max_concurrency"
    metrics: dict[str, float] = {}
    reason = None
    if found.good is not None:
        metrics[name] = found.good
        tok_s = outcomes[found.good].metrics.get("load_output_tok_s")
        if tok_s is not None:
            metrics["capacity_output_tok_s"] = tok_s
    else:
        reason = f"no level in [{lo:g}, {hi:g}] meets the bounds (the lowest did not)"
    if not found.resolved:
        reason = f"stopped after {spec.max_levels} levels (max_levels) before the " \
                 f"resolution {spec.resolution:g}"
    return DecodeSample.model_validate({
        **base, "type": "sample", "workload": row, "rep": 0, "t": time.time(),
        "context": spec.prompt_tokens, "decode_tokens": spec.output_tokens,
        "valid": found.good is not None and found.resolved,
        "status": "ok" if found.good is not None and found.resolved else "invalid",
        "reason": reason, "metrics": metrics,
        "capacity": {"good": found.good, "bad": found.bad, "resolution": spec.resolution,
                     "at_top": found.bad is None, "bounds": bounds,
                     "tried": [[v, ok] for v, ok in found.tried]}})
