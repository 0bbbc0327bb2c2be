"""Lines under the table from what the collectors and the runner recorded:
unavailable metrics, flushes, sampling periods, drift, side calls, faults."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

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
from abbench.report.text import md_escape


def _pct(a: float, b: float) -> float:
    ref = max(abs(a), abs(b))
    return 0.0 if ref == 0 else abs(a - b) / ref * 100


def drift_report(records: list[Record]) -> tuple[list[str], list[str]]:
    """(detail lines: a table of each signal's per-round mean by arm, warnings)."""
    drift = [r for r in records if isinstance(r, DriftRecord)]
    if not drift:
        return [], []
    warn_pct = float(drift[0].warn_pct)
    by: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in drift:
        for key, s in r.signals.items():
            by[key][r.arm][r.round] = float(s["mean"])
    arms = list(dict.fromkeys(r.arm for r in drift))
    rounds = sorted({r.round for r in drift})
    lines = ["| signal | arm | " + " | ".join(f"r{n}" for n in rounds) + " |",
             "|---|---|" + "---|" * len(rounds)]
    warnings: list[str] = []
    for key, per_arm in by.items():
        label, unit = SIGNALS.get(key, (key, ""))
        head = f"{label} ({unit})" if unit else label
        for arm in arms:
            vals = per_arm.get(arm, {})
            cells = [f"{vals[n]:.1f}" if n in vals else "–" for n in rounds]
            lines.append(f"| {head} | {arm} | " + " | ".join(cells) + " |")
        # load follows our own work: only big gaps count
        tol = max(warn_pct, 25.0) if key in ("cpu_load_1m", "cpu_percent") else warn_pct
        means = {a: statistics.fmean(v.values()) for a, v in per_arm.items() if v}
        if len(means) > 1:
            hi, lo = max(means, key=means.__getitem__), min(means, key=means.__getitem__)
            gap = _pct(means[hi], means[lo])
            if gap > tol:
                warnings.append(f"Warning: {label} differs between arms by {gap:.0f}% "
                                f"({hi} {means[hi]:.1f} vs {lo} {means[lo]:.1f} {unit}).")
        per_round = defaultdict(list)
        for v in per_arm.values():
            for n, x in v.items():
                per_round[n].append(x)
        if len(per_round) > 1:
            seq = [statistics.fmean(per_round[n]) for n in sorted(per_round)]
            change = _pct(seq[0], seq[-1])
            if change > tol:
                warnings.append(f"Warning: {label} drifted across the run by {change:.0f}% "
                                f"(first round {seq[0]:.1f}, last {seq[-1]:.1f} {unit}).")
    return lines, warnings


def collector_notes(records: list[Record]) -> list[str]:
    """Lines for the end of the report: unavailable metrics, sampling periods, drift."""
    out: list[str] = []
    why: dict[str, set[str]] = defaultdict(set)
    periods: set[float] = set()
    collected = [r for r in records if isinstance(r, CollectorSample)]
    for r in collected:
        for metric, reason in (r.unavailable or {}).items():
            why[metric].add(reason)
        if r.period_ms is not None and r.metrics:
            periods.add(float(r.period_ms))
    for metric, reasons in why.items():
        out.append(f"Unavailable: {metric}: {'; '.join(sorted(reasons))}.")
    missing: dict[str, set[str]] = defaultdict(set)
    for c in records:
        if isinstance(c, CountersRecord) and c.missing:
            missing[c.arm].update(c.missing)
    for arm, names in sorted(missing.items()):
        out.append(f"Counters missing: arm {arm}'s server does not expose "
                   f"{', '.join(sorted(names))} (read once per server life).")
    sources: dict[str, set[str]] = defaultdict(set)
    for r in collected:
        if r.source and r.metrics:
            for metric in r.metrics:
                sources[metric].add(r.source)
    for metric, srcs in sorted(sources.items()):
        out.append(f"Source of {metric}: {'; '.join(sorted(srcs))}.")
    flushes = [r for r in records if isinstance(r, FlushRecord)]
    failed = [r for r in flushes if not r.ok]
    if flushes:
        out.append(f"Cache flushes: {len(flushes) - len(failed)} of {len(flushes)} succeeded"
                   + (f" (failed: {failed[0].reason})." if failed else "."))
    if periods:
        out.append("Memory peaks: sampled every " + ", ".join(f"{p:g}" for p in
                   sorted(periods)) + " ms over the server's whole process tree; spikes "
                   "shorter than that can be missed.")
    lines, warnings = drift_report(records)
    out.extend(warnings)
    if lines:
        out += ["", "<details><summary>Drift signals (mean per server life)</summary>", "",
                *lines, "", "</details>"]
    return out


def side_call_notes(records: list[Record], meta: dict[str, Any]) -> list[str]:
    """Side calls against a server with one slot queue behind the long decode: they
    measure the wait, not concurrent service. Said for every arm whose server says so
    (llama.cpp's /props ``total_slots``)."""
    with_side = {r.arm for r in records
                 if isinstance(r, Sample) and "side_call_ms" in r.metrics}
    out = []
    for arm in sorted(with_side):
        slots = ((meta.get("servers") or {}).get(arm) or {}).get("total_slots")
        if slots == 1:
            out.append(f"Warning: arm {arm}'s server has one slot (/props total_slots = 1): "
                       "its side calls waited for the long decode to end; start it with -np 2 "
                       "or more to serve them alongside.")
    return out


def fault_notes(records: list[Record], meta: dict[str, Any],
                max_samples: int = 10) -> list[str]:
    """Report lines: rounds left out and why, unfinished pairs, invalid samples."""
    state = read_state(records, meta)
    notes: list[str] = []
    for r in state.failed_rounds():
        why = "; ".join(f"arm {md_escape(a)} failed: {md_escape(reason)}"
                        for (a, rr), reason in sorted(state.failed.items())
                        if rr == r and (a, rr) not in state.ok)
        again = (f" It was run again as round {state.reruns[r]}." if r in state.reruns else
                 " `abbench run --resume` runs it again.")
        notes.append(f"Round {r} is left out of the comparison (its pair failed: {why})."
                     f"{again}")
    left = state.unfinished()
    if left:
        pairs = ", ".join(f"{md_escape(s.arm)}/round {s.round}" for s in left[:12])
        more = f" and {len(left) - 12} more" if len(left) > 12 else ""
        notes.append(f"Not run yet (interrupted): {pairs}{more}; "
                     "`abbench run --resume` finishes them.")
    bad = [rec for rec in records if isinstance(rec, Sample) and not rec.valid]
    for rec in bad[:max_samples]:
        notes.append(f"Sample {rec.status or 'invalid'}: arm {md_escape(rec.arm)}, "
                     f"round {rec.round}, {md_escape(rec.workload)} rep "
                     f"{rec.rep or 0}: {md_escape(rec.reason or 'no reason')}.")
    if len(bad) > max_samples:
        notes.append(f"... and {len(bad) - max_samples} more invalid samples "
                     "(samples.jsonl has each reason).")
    return notes


def run_notes(meta: Mapping[str, Any]) -> list[str]:
    """Lines under the report about how the number of rounds was decided."""
    seq = meta.get("until_ci")
    if not seq:
        return []
    looks = ", ".join(str(lk["rounds"]) for lk in seq.get("looks", []))
    return [f"Rounds: --until-ci {seq['target'] * 100:g}% (max {seq['max_rounds']} rounds, "
            f"looks after rounds {looks or '–'}); stopped: {seq.get('stopped') or 'not yet'}."]


def load_notes(records: list[Record]) -> list[str]:
    """Lines about load workloads: how ITL was computed from the chunks, requests left
    out of the percentiles, and the checks that the client was not the bottleneck."""
    samples = [r for r in records if isinstance(r, LoadSample) and r.level]
    if not samples:
        return []
    kept = {(s.slot, s.workload) for s in samples}  # the compared server lives
    reqs = [r for r in records if isinstance(r, LoadRequest) and not r.warmup
            and (r.slot, r.workload) in kept]
    ok = [r for r in reqs if r.status == "ok"]
    out: list[str] = []
    several = [r for r in ok if r.tokens_per_chunk in ("spread", "reported")]
    if several:
        how = " and ".join(sorted({"counts the server sent" if r.tokens_per_chunk ==
                                   "reported" else "counts inferred from the total"
                                   for r in several}))
        out.append(f"Load ITL: in {len(several)} of {len(ok)} requests some chunks carried "
                   f"several tokens ({how}); each such chunk's gap was divided evenly over "
                   "its tokens.")
    elif ok:
        out.append("Load ITL: every chunk carried one token; each gap between two chunks is "
                   "one inter-token latency.")
    bad = [r for r in reqs if r.status != "ok"]
    if bad:
        why: dict[str, int] = defaultdict(int)
        for r in bad:
            why[str(r.reason or r.status)] += 1
        top = "; ".join(f"{md_escape(k)} (x{v})" for k, v in
                        sorted(why.items(), key=lambda kv: -kv[1])[:3])
        out.append(f"Load requests left out of the percentiles: {len(bad)} of {len(reqs)} "
                   f"failed or had the wrong length ({top}); each counts as a failed "
                   "request and never towards goodput.")
    busy = [s for s in samples if (s.client_cpu_share or 0.0) > 0.8]
    if busy:
        worst = max(busy, key=lambda s: s.client_cpu_share or 0.0)
        share = worst.client_cpu_share or 0.0
        out.append(f"Warning: the load client used up to {share * 100:.0f}% "
                   f"of a core ({md_escape(worst.arm)}, round {worst.round}, "
                   f"{md_escape(worst.workload)}): it may have limited the load it sent.")
    for s in samples:
        rate, sent = s.rate, s.sent_req_s
        if rate and sent and abs(sent / rate - 1) > 0.05 and s.valid:
            out.append(f"Warning: {md_escape(s.workload)} ({md_escape(s.arm)}, round "
                       f"{s.round}) sent {sent:.2f} req/s against {rate:g} asked for.")
    return out


def replay_notes(records: list[Record]) -> list[str]:
    """Lines about trace and sessions replays: the cache state designed against the one
    each arm's server measured, the steady window, and gaps beyond the tolerance."""
    samples = [r for r in records if isinstance(r, LoadSample)
               and r.level in ("trace", "sessions")]
    out: list[str] = []
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
        line = f"Replay {md_escape(row)}: cache {cache}"
        if steady:
            share = steady.get("share") or [0, 1]
            line += (f"; steady window {share[0]:.0%}-{share[1]:.0%} of the planned send order "
                     f"({steady.get('requests')} requests per replay, "
                     f"{steady.get('left_out')} of ramp-up and drain left out)")
        if d is not None:
            line += f"; designed cache hit rate {d:.1%}"
        if measured:
            line += "; measured " + ", ".join(
                f"{md_escape(a)} {statistics.fmean(v):.1%}" for a, v in sorted(measured.items()))
        out.append(line + ".")
        for s, e in zip(mine, extra, strict=True):
            for key in ("cache_warning", "cache_unmeasured"):
                if e.get(key):
                    out.append(f"Warning: {md_escape(row)} ({md_escape(s.arm)}, round "
                               f"{s.round}, rep {(s.rep or 0) + 1}): {md_escape(str(e[key]))}.")
    return out
