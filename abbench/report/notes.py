"""What the report says beside the table, as data (:class:`Note`), from what the
collectors and the runner recorded: unavailable metrics, flushes, sampling periods, drift,
side calls, faults, load checks. :mod:`abbench.report.markdown` words them."""

from __future__ import annotations

import statistics
from collections import defaultdict

from abbench.collectors.drift import SIGNALS
from abbench.model.records import (
    CollectorSample,
    CountersRecord,
    DriftRecord,
    FlushRecord,
    LoadRequest,
    LoadSample,
    Record,
    Sample,
)
from abbench.model.rounds import read_state
from abbench.model.runmeta import MetaLike, RunMeta
from abbench.report.tablemodel import Note


def _pct(a: float, b: float) -> float:
    ref = max(abs(a), abs(b))
    return 0.0 if ref == 0 else abs(a - b) / ref * 100


def drift_notes(records: list[Record]) -> tuple[list[Note], Note | None]:
    """(warnings: a signal that differs between arms or drifted across the run, the
    table of each signal's mean per round by arm: None where the arm has no value)."""
    drift = [r for r in records if isinstance(r, DriftRecord)]
    if not drift:
        return [], None
    warn_pct = float(drift[0].warn_pct)
    by: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in drift:
        for key, s in r.signals.items():
            by[key][r.arm][r.round] = float(s["mean"])
    arms = list(dict.fromkeys(r.arm for r in drift))
    rounds = sorted({r.round for r in drift})
    signals = []
    warnings: list[Note] = []
    for key, per_arm in by.items():
        label, unit = SIGNALS.get(key, (key, ""))
        signals.append({"signal": key, "label": label, "unit": unit,
                        "means": {arm: [per_arm.get(arm, {}).get(n) for n in rounds]
                                  for arm in arms}})
        # load follows our own work: only big gaps count
        tol = max(warn_pct, 25.0) if key in ("cpu_load_1m", "cpu_percent") else warn_pct
        means = {a: statistics.fmean(v.values()) for a, v in per_arm.items() if v}
        if len(means) > 1:
            hi, lo = max(means, key=means.__getitem__), min(means, key=means.__getitem__)
            gap = _pct(means[hi], means[lo])
            if gap > tol:
                warnings.append(Note("drift_between_arms", {
                    "signal": key, "label": label, "unit": unit, "gap_pct": gap,
                    "high_arm": hi, "high": means[hi], "low_arm": lo, "low": means[lo]}))
        per_round = defaultdict(list)
        for v in per_arm.values():
            for n, x in v.items():
                per_round[n].append(x)
        if len(per_round) > 1:
            seq = [statistics.fmean(per_round[n]) for n in sorted(per_round)]
            change = _pct(seq[0], seq[-1])
            if change > tol:
                warnings.append(Note("drift_across_run", {
                    "signal": key, "label": label, "unit": unit, "change_pct": change,
                    "first": seq[0], "last": seq[-1]}))
    return warnings, Note("drift_table", {"arms": arms, "rounds": rounds, "signals": signals})


def collector_notes(records: list[Record]) -> list[Note]:
    """Unavailable metrics, missing counters, metric sources, flushes, sampling periods,
    drift."""
    out: list[Note] = []
    why: dict[str, set[str]] = defaultdict(set)
    periods: set[float] = set()
    collected = [r for r in records if isinstance(r, CollectorSample)]
    for r in collected:
        for metric, reason in (r.unavailable or {}).items():
            why[metric].add(reason)
        if r.period_ms is not None and r.metrics:
            periods.add(float(r.period_ms))
    for metric, reasons in why.items():
        out.append(Note("unavailable", {"metric": metric, "reasons": sorted(reasons)}))
    missing: dict[str, set[str]] = defaultdict(set)
    for c in records:
        if isinstance(c, CountersRecord) and c.missing:
            missing[c.arm].update(c.missing)
    for arm, names in sorted(missing.items()):
        out.append(Note("counters_missing", {"counters": sorted(names)}, arm=arm))
    sources: dict[str, set[str]] = defaultdict(set)
    for r in collected:
        if r.source and r.metrics:
            for metric in r.metrics:
                sources[metric].add(r.source)
    for metric, srcs in sorted(sources.items()):
        out.append(Note("metric_source", {"metric": metric, "sources": sorted(srcs)}))
    flushes = [r for r in records if isinstance(r, FlushRecord)]
    failed = [r for r in flushes if not r.ok]
    if flushes:
        out.append(Note("cache_flushes", {"ok": len(flushes) - len(failed),
                                          "total": len(flushes),
                                          "first_failure": failed[0].reason if failed
                                          else None}))
    if periods:
        out.append(Note("memory_sampling", {"periods_ms": sorted(periods)}))
    warnings, table = drift_notes(records)
    out.extend(warnings)
    if table is not None:
        out.append(table)
    return out


def side_call_notes(records: list[Record], meta: RunMeta) -> list[Note]:
    """Side calls against a server with one slot queue behind the long decode: they
    measure the wait, not concurrent service. Said for every arm whose server says so
    (llama.cpp's /props ``total_slots``)."""
    with_side = {r.arm for r in records
                 if isinstance(r, Sample) and "side_call_ms" in r.metrics}
    out = []
    for arm in sorted(with_side):
        slots = (meta.servers.get(arm) or {}).get("total_slots")
        if slots == 1:
            out.append(Note("side_calls_one_slot", {"total_slots": 1}, arm=arm))
    return out


def fault_notes(records: list[Record], meta: MetaLike,
                max_samples: int = 10) -> list[Note]:
    """Rounds left out and why, unfinished pairs, invalid samples."""
    state = read_state(records, meta)
    notes: list[Note] = []
    for r in state.failed_rounds():
        failed = [[a, reason] for (a, rr), reason in sorted(state.failed.items())
                  if rr == r and (a, rr) not in state.ok]
        notes.append(Note("round_left_out", {"failed": failed,
                                             "rerun": state.reruns.get(r)}, round=r))
    left = state.unfinished()
    if left:
        notes.append(Note("not_run_yet", {"pairs": [[s.arm, s.round] for s in left[:12]],
                                          "more": max(len(left) - 12, 0)}))
    bad = [rec for rec in records if isinstance(rec, Sample) and not rec.valid]
    for rec in bad[:max_samples]:
        notes.append(Note("sample_invalid", {"status": rec.status, "rep": rec.rep or 0,
                                             "reason": rec.reason},
                          arm=rec.arm, row=rec.workload, round=rec.round))
    if len(bad) > max_samples:
        notes.append(Note("more_invalid_samples", {"count": len(bad) - max_samples}))
    return notes


def run_notes(meta: RunMeta) -> list[Note]:
    """How the number of rounds was decided (--until-ci)."""
    seq = meta.until_ci
    if seq is None:
        return []
    return [Note("until_ci", {"target": seq.target, "max_rounds": seq.max_rounds,
                              "looks": [lk.rounds for lk in seq.looks],
                              "stopped": seq.stopped})]


def load_notes(records: list[Record]) -> list[Note]:
    """Load workloads: how ITL was computed from the chunks, requests left out of the
    percentiles, and the checks that the client was not the bottleneck."""
    samples = [r for r in records if isinstance(r, LoadSample) and r.level]
    if not samples:
        return []
    kept = {(s.slot, s.workload) for s in samples}  # the compared server lives
    reqs = [r for r in records if isinstance(r, LoadRequest) and not r.warmup
            and (r.slot, r.workload) in kept]
    ok = [r for r in reqs if r.status == "ok"]
    out: list[Note] = []
    several = [r for r in ok if r.tokens_per_chunk in ("spread", "reported")]
    if several:
        out.append(Note("load_itl_chunks", {
            "several": len(several), "requests": len(ok),
            "counts": sorted({str(r.tokens_per_chunk) for r in several})}))
    elif ok:
        out.append(Note("load_itl_one_token"))
    bad = [r for r in reqs if r.status != "ok"]
    if bad:
        why: dict[str, int] = defaultdict(int)
        for r in bad:
            why[str(r.reason or r.status)] += 1
        top = [[k, v] for k, v in sorted(why.items(), key=lambda kv: -kv[1])[:3]]
        out.append(Note("load_requests_left_out", {"left_out": len(bad), "requests": len(reqs),
                                                   "top": top}))
    busy = [s for s in samples if (s.client_cpu_share or 0.0) > 0.8]
    if busy:
        worst = max(busy, key=lambda s: s.client_cpu_share or 0.0)
        out.append(Note("load_client_busy", {"cpu_share": worst.client_cpu_share or 0.0},
                        arm=worst.arm, row=worst.workload, round=worst.round))
    for s in samples:
        rate, sent = s.rate, s.sent_req_s
        if rate and sent and abs(sent / rate - 1) > 0.05 and s.valid:
            out.append(Note("load_rate_off", {"sent_req_s": sent, "rate": rate},
                            arm=s.arm, row=s.workload, round=s.round))
    return out


def exposure_notes(meta: RunMeta) -> list[Note]:
    """A warning per arm whose server listened beyond 127.0.0.1 (run.json's exposed)."""
    return [exposure_note(arm, list(addrs))
            for arm, addrs in sorted(meta.exposed.items()) if addrs]


def exposure_note(arm: str, addresses: list[str]) -> Note:
    """A server that listens beyond 127.0.0.1."""
    return Note("exposed", {"addresses": addresses}, arm=arm)


def replay_notes(records: list[Record]) -> list[Note]:
    """Trace and sessions replays: the cache state designed against the one each arm's
    server measured, the steady window, and gaps beyond the tolerance."""
    samples = [r for r in records if isinstance(r, LoadSample)
               and r.level in ("trace", "sessions")]
    out: list[Note] = []
    for row in sorted({s.workload for s in samples}):
        mine = [s for s in samples if s.workload == row]
        extra = [s.model_extra or {} for s in mine]
        steady = next((e["steady"] for e in extra if isinstance(e.get("steady"), dict)), None)
        designed = [s.metrics.get("trace_designed_hit_rate") for s in mine]
        d = next((x for x in designed if x is not None), None)
        measured: dict[str, list[float]] = defaultdict(list)
        for s in mine:
            v = s.metrics.get("trace_hit_rate")
            if v is not None:
                measured[s.arm].append(float(v))
        cache = next((str(e["cache"]) for e in extra if e.get("cache")), "as-is")
        out.append(Note("replay", {
            "cache": cache, "steady": steady, "designed": d,
            "measured": {a: statistics.fmean(v) for a, v in sorted(measured.items())}},
            row=row))
        for s, e in zip(mine, extra, strict=True):
            for key in ("cache_warning", "cache_unmeasured"):
                if e.get(key):
                    out.append(Note("replay_cache", {"rep": (s.rep or 0) + 1,
                                                     "reason": str(e[key])},
                                    arm=s.arm, row=row, round=s.round))
    return out
