"""Seeded trace generator (``abbench trace make``) and a trace's statistics.

A generated trace has the statistics it was asked for by construction, not just in
expectation: lengths are drawn (lognormal), then scaled so that their mean is the
mean asked for; arrival gaps are drawn (gamma of shape ``burstiness``: 1 is Poisson,
below 1 burstier), then scaled so that the gaps span exactly (n - 1) / rate; the
shared-prefix share is set per request as a whole number of blocks. What is printed
(:func:`stats`) is measured on the trace written, so a user sees both.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from abbench.errors import ConfigError
from abbench.workload.trace import (
    MOONCAKE_BLOCK,
    Trace,
    TraceRequest,
    designed_reuse,
    read_trace,
    start_ms,
    write_jsonl,
)


@dataclass(frozen=True)
class MooncakeShape:
    """Defaults: Mooncake's released conversation trace as measured by :func:`stats`
    (docs/traffic.md): 3.4 requests/s, mean input 12,035 and output 343 tokens (input
    median 6,909: lognormal sigma 1.05), 37% of prompt tokens a prefix sent before."""

    requests: int = 1000
    rate: float = 3.4
    burstiness: float = 1.0
    input_mean: float = 12035.0
    input_sigma: float = 1.05
    output_mean: float = 343.0
    output_sigma: float = 0.6
    #: designed share of prompt tokens that an earlier request already sent as a prefix
    shared_share: float = 0.37
    prefix_groups: int = 4
    block_tokens: int = 512


@dataclass(frozen=True)
class SessionsShape:
    sessions: int = 16
    turns: int = 4
    prefix_tokens: int = 2048
    user_tokens: int = 256
    output_tokens: int = 64
    think_s: float = 1.0
    #: sessions started per second (gamma gaps of ``burstiness``)
    rate: float = 1.0
    burstiness: float = 1.0
    #: lognormal spread of user/output lengths (0: exact)
    spread: float = 0.0
    #: share of turns that also send a side call
    side_share: float = 0.0
    side_tokens: int = 64
    side_output: int = 8


def _scaled_lengths(rng: random.Random, n: int, mean: float, sigma: float,
                    low: int = 1) -> list[int]:
    if sigma <= 0:
        return [max(low, round(mean))] * n
    xs = [rng.lognormvariate(0.0, sigma) for _ in range(n)]
    k = mean / (sum(xs) / n)
    out = [max(low, round(x * k)) for x in xs]
    # rounding and the floor move the mean: put the difference back on the largest
    diff = round(mean * n) - sum(out)
    big = max(range(n), key=out.__getitem__)
    out[big] = max(low, out[big] + diff)
    return out


def arrival_ms(rng: random.Random, n: int, rate: float, burstiness: float) -> list[float]:
    """``n`` send times (ms from 0): gamma(shape=burstiness) gaps spanning (n-1)/rate s."""
    if n <= 1:
        return [0.0] * n
    gaps = [rng.gammavariate(burstiness, 1.0) for _ in range(n - 1)]
    k = (n - 1) / rate / sum(gaps) * 1e3
    out, t = [0.0], 0.0
    for g in gaps:
        t += g * k
        out.append(t)
    return out


def make_mooncake(shape: MooncakeShape, seed: int) -> list[dict[str, Any]]:
    """Mooncake-format rows: each request takes a shared chain of blocks of one of
    ``prefix_groups`` groups (about ``shared_share`` of its blocks), then blocks of
    its own."""
    rng = random.Random(f"abbench-trace-make:mooncake:{seed}")
    n, b = shape.requests, shape.block_tokens
    ins = _scaled_lengths(rng, n, shape.input_mean, shape.input_sigma)
    outs = _scaled_lengths(rng, n, shape.output_mean, shape.output_sigma)
    times = arrival_ms(rng, n, shape.rate, shape.burstiness)
    chain_len = max(1, math.ceil(max(ins) / b))
    next_id = shape.prefix_groups * chain_len  # ids below are the groups' chains
    sent = [0] * shape.prefix_groups  # blocks of each group's chain sent so far
    want, got = 0.0, 0
    rows = []
    for i in range(n):
        blocks = math.ceil(ins[i] / b)
        g = rng.randrange(shape.prefix_groups)
        # error diffusion: share as many blocks as keep the designed reuse so far on
        # the target (full blocks only: a request's last block is partial)
        want += shape.shared_share * ins[i]
        shared = min(blocks - 1, max(0, round((want - got) / b)))
        got += min(shared, sent[g]) * b
        sent[g] = max(sent[g], shared)
        ids = [g * chain_len + j for j in range(shared)]
        ids += list(range(next_id, next_id + blocks - shared))
        next_id += blocks - shared
        rows.append({"timestamp": round(times[i]), "input_length": ins[i],
                     "output_length": outs[i], "hash_ids": ids})
    return rows


def make_sessions(shape: SessionsShape, seed: int) -> list[dict[str, Any]]:
    """Sessions-format rows: every session starts with the same shared prefix."""
    rng = random.Random(f"abbench-trace-make:sessions:{seed}")
    n_turns = shape.sessions * shape.turns
    users = _scaled_lengths(rng, n_turns, shape.user_tokens, shape.spread)
    outs = _scaled_lengths(rng, n_turns, shape.output_tokens, shape.spread, low=2)
    starts = arrival_ms(rng, shape.sessions, shape.rate, shape.burstiness)
    rows: list[dict[str, Any]] = []
    for s in range(shape.sessions):
        for t in range(1, shape.turns + 1):
            k = s * shape.turns + t - 1
            row: dict[str, Any] = {"session": f"s{s}", "turn": t, "input_tokens": users[k],
                                   "output_tokens": outs[k]}
            if t == 1:
                row.update(timestamp=round(starts[s]), prefix="shared",
                           prefix_tokens=shape.prefix_tokens)
            else:
                row["think_ms"] = round(rng.expovariate(1.0 / shape.think_s) * 1e3) \
                    if shape.think_s > 0 else 0
            rows.append(row)
            if shape.side_share > 0 and rng.random() < shape.side_share:
                rows.append({"session": f"s{s}", "turn": t, "side": True,
                             "input_tokens": shape.side_tokens,
                             "output_tokens": shape.side_output})
    return rows


def _pct(xs: Sequence[float], q: float) -> float:
    ys = sorted(xs)
    h = (len(ys) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (h - lo) * (ys[hi] - ys[lo])


def planned_order(trace: Trace) -> list[TraceRequest]:
    """Requests in the order an unloaded replay would send them: by each session's
    start, then turn (think times and service times make later turns later)."""
    sessions = trace.sessions()
    order = sorted(sessions.values(), key=lambda rs: start_ms(rs) or 0.0)
    if trace.kind == "mooncake":
        return sorted(trace.requests, key=lambda r: (r.t_ms or 0.0, r.index))
    # interleave sessions by their planned turn times (start + sum of think)
    timed: list[tuple[float, int, TraceRequest]] = []
    for rs in order:
        t = start_ms(rs) or 0.0
        for r in rs:
            if r.t_ms is not None:
                t = max(t, r.t_ms)
            t += r.think_ms
            timed.append((t, r.index, r))
    return [r for _, _, r in sorted(timed, key=lambda x: (x[0], x[1]))]


def stats(trace: Trace) -> dict[str, float]:
    """What a trace is, measured: counts, lengths, arrival rate and burstiness (the
    coefficient of variation of gaps between session starts), the designed reuse."""
    reqs = trace.requests
    order = planned_order(trace)
    reuse = designed_reuse(order)
    ins = [r.input_length for r in reqs]
    outs = [r.output_length for r in reqs if not r.side]
    sessions = trace.sessions()
    starts = sorted(start_ms(rs) or 0.0 for rs in sessions.values())
    out: dict[str, float] = {
        "requests": float(len(reqs)), "sessions": float(len(sessions)),
        "turns_per_session": sum(1 for r in reqs if not r.side) / len(sessions),
        "side_calls": float(sum(1 for r in reqs if r.side)),
        "input_mean": sum(ins) / len(ins), "input_p50": _pct(ins, 50),
        "input_p90": _pct(ins, 90), "output_mean": sum(outs) / len(outs),
        "output_p50": _pct(outs, 50), "output_p90": _pct(outs, 90),
        "shared_share": sum(reuse) / sum(ins),
    }
    if len(starts) >= 2 and starts[-1] > starts[0]:
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        mean = sum(gaps) / len(gaps)
        out["rate"] = (len(starts) - 1) / ((starts[-1] - starts[0]) / 1e3)
        out["burstiness_cv"] = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
        out["span_s"] = (starts[-1] - starts[0]) / 1e3
    return out


def user_tokens_mean(trace: Trace) -> float:
    """Mean tokens a non-side turn appends (the sessions kind's ``input_tokens``)."""
    turns = [r.segments[-1].length for r in trace.requests if not r.side]
    return sum(turns) / len(turns)


#: per kind: the shape field each printed statistic was asked by
ASKED = {
    "mooncake": {"requests": "requests", "rate": "rate", "input_mean": "input_mean",
                 "output_mean": "output_mean", "shared_share": "shared_share"},
    "sessions": {"sessions": "sessions", "turns_per_session": "turns", "rate": "rate",
                 "user_tokens_mean": "user_tokens", "output_mean": "output_tokens"},
}


def make_trace(kind: str, path: Path, seed: int, params: dict[str, Any]
               ) -> list[tuple[str, float | None, float]]:
    """Write a ``kind`` trace with the shape ``params`` to ``path``; (statistic, asked
    or None, measured) for each statistic, measured on the file as read back."""
    shape_type = MooncakeShape if kind == "mooncake" else SessionsShape
    known = {f.name for f in fields(shape_type)}
    wrong = sorted(set(params) - known)
    if wrong:
        raise ConfigError(f"{', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} not "
                          f"part of a {kind} trace",
                          hint=f"{kind} takes: {', '.join(sorted(known))}")
    shape: Any = shape_type(**params)
    _check_shape(shape)
    rows = make_mooncake(shape, seed) if kind == "mooncake" else make_sessions(shape, seed)
    try:
        write_jsonl(path, rows)
    except OSError as e:
        raise ConfigError(f"cannot write the trace: {e.strerror}", where=str(path)) from None
    block = shape.block_tokens if kind == "mooncake" else MOONCAKE_BLOCK
    trace = read_trace(path, kind, block)
    measured = stats(trace)
    if kind == "sessions":
        measured["user_tokens_mean"] = user_tokens_mean(trace)
    asked = {stat: float(getattr(shape, name)) for stat, name in ASKED[kind].items()}
    asked["burstiness_cv"] = 1 / math.sqrt(shape.burstiness)  # gamma(k) gaps: CV 1/sqrt(k)
    return [(k, asked.get(k), v) for k, v in measured.items()] + \
        [(k, v, float("nan")) for k, v in asked.items() if k not in measured]


def _check_shape(shape: MooncakeShape | SessionsShape) -> None:
    for f in fields(shape):
        v = getattr(shape, f.name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ConfigError(f"--{f.name.replace('_', '-')} must be a number, got {v!r}")
        low = 0.0 if f.name in ("shared_share", "side_share", "spread", "think_s",
                                "input_sigma", "output_sigma") else 1e-9
        if v < low:
            raise ConfigError(f"--{f.name.replace('_', '-')} must be "
                              f"{'>= 0' if low == 0 else '> 0'}, got {v:g}")
    if isinstance(shape, MooncakeShape) and shape.shared_share >= 1:
        raise ConfigError("--shared-share must be below 1 (a request's last block is its own)")
    if isinstance(shape, SessionsShape) and shape.side_share > 1:
        raise ConfigError("--side-share is a share of turns: at most 1")


def trace_stats(kind: str, path: Path, block_tokens: int) -> list[tuple[str, float | None,
                                                                      float]]:
    """The statistics of a trace file (nothing asked)."""
    trace = read_trace(path, kind, block_tokens)
    measured = stats(trace)
    if kind == "sessions":
        measured["user_tokens_mean"] = user_tokens_mean(trace)
    return [(k, None, v) for k, v in measured.items()]


def render_stats(title: str, rows: list[tuple[str, float | None, float]]) -> str:
    """Statistics of a trace as a small table: asked (if any), measured, gap."""
    lines = [title, "",
             f"{'statistic':<20} {'asked':>12} {'measured':>12} {'gap':>8}"]
    for name, asked, got in rows:
        a = "" if asked is None else f"{asked:,.6g}"
        gap = "" if asked in (None, 0) or got != got else f"{(got / asked - 1) * 100:+.1f}%"
        lines.append(f"{name:<20} {a:>12} {got:>12,.6g} {gap:>8}")
    return "\n".join(lines) + "\n"
