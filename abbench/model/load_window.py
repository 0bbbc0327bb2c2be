"""Load windows as data: from stored per-request records to a level's metrics.

Pure functions, so that any percentile can be recomputed later from
``samples.jsonl`` alone: ``aggregate(requests, slo)`` takes the ``load_request``
records of one (arm, round, level, rep) and returns the metrics the runner stores
in that level's sample.

Definitions (docs/load-workloads.md):

- the window runs from the first measured request's send to the last measured
  request's end (warm-up requests are sent first, at the same concurrency or rate,
  and left out);
- output tok/s = completion tokens of the measured requests that succeeded / window;
  requests/s = those requests / window;
- TTFT = first content chunk - send; end-to-end = last byte - send;
- ITL: every gap between two content chunks of a request, divided evenly over the
  tokens the later chunk carried (one token per chunk: the gap itself); pooled over
  the window's successful requests, one value per token after each request's first;
- percentiles by linear interpolation between closest ranks (numpy's default);
- goodput: the measured requests that succeeded and met every SLO bound (TTFT, the
  request's mean ITL, end-to-end) as a share of all measured requests, and per
  second of the window; a failed request never meets it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: the percentiles every latency gets
PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks
    (Hyndman-Fan type 7, numpy's default)."""
    if not values:
        raise ValueError("no values")
    xs = sorted(values)
    h = (len(xs) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def chunk_tokens(n_chunks: int, completion_tokens: int | None,
                 reported: Sequence[int] | None = None) -> tuple[list[int], str]:
    """Tokens carried by each content chunk, and how that was known.

    ``reported``: per-chunk counts the server sent (a ``tokens`` list, or per-chunk
    usage), used when they add up to the completion count ("reported"). Else one
    token per chunk when the chunk and token counts agree ("one per chunk"), or
    the tokens beyond the first spread evenly over the later chunks ("spread").
    """
    if n_chunks <= 0:
        return [], "no chunks"
    if reported is not None and len(reported) == n_chunks and (
            completion_tokens is None or sum(reported) == completion_tokens):
        ks = [int(k) for k in reported]
        return ks, "one per chunk" if all(k == 1 for k in ks) else "reported"
    if completion_tokens is None or completion_tokens <= n_chunks:
        return [1] * n_chunks, "one per chunk"
    if n_chunks == 1:
        return [completion_tokens], "spread"
    base, extra = divmod(completion_tokens - 1, n_chunks - 1)
    return [1] + [base + (1 if i < extra else 0) for i in range(n_chunks - 1)], "spread"


def itl_values(chunk_ms: Sequence[float], tokens: Sequence[int]) -> list[float]:
    """Inter-token latencies (ms) of one request: each chunk gap over its tokens."""
    out: list[float] = []
    for i in range(1, len(chunk_ms)):
        k = tokens[i] if i < len(tokens) else 1
        if k <= 0:
            continue
        gap = chunk_ms[i] - chunk_ms[i - 1]
        out.extend([gap / k] * k)
    return out


def mean_itl(req: Mapping[str, Any]) -> float | None:
    """A request's mean inter-token latency (ms): (last chunk - first) / (tokens - 1)."""
    chunks = req.get("chunk_ms") or []
    n = req.get("completion_tokens")
    if len(chunks) < 2 or not n or n < 2:
        return None
    return (chunks[-1] - chunks[0]) / (n - 1)


def meets(req: Mapping[str, Any], slo: Mapping[str, float | None]) -> bool:
    """Whether one request succeeded and met every bound of ``slo``."""
    if req.get("status") != "ok":
        return False
    checks = (("ttft_ms", req.get("ttft_ms")), ("itl_ms", mean_itl(req)),
              ("e2e_ms", req.get("e2e_ms")))
    for key, value in checks:
        bound = slo.get(key)
        if bound is None:
            continue
        if value is None or value > bound:
            return False
    return True


def tokens_of(req: Mapping[str, Any]) -> list[int]:
    ks = req.get("chunk_tokens")
    return list(ks) if ks else [1] * len(req.get("chunk_ms") or [])


def aggregate(requests: Iterable[Mapping[str, Any]],
              slo: Mapping[str, float | None] | None = None) -> tuple[dict[str, float],
                                                                      dict[str, Any]]:
    """(metrics, detail) of one level's window from its ``load_request`` records."""
    measured = [r for r in requests if not r.get("warmup")]
    ok = [r for r in measured if r.get("status") == "ok"]
    ended = [r for r in measured if r.get("t_end") is not None]
    detail: dict[str, Any] = {"requests": len(measured), "ok": len(ok),
                              "failed": len(measured) - len(ok)}
    metrics: dict[str, float] = {"load_failed": float(len(measured) - len(ok))}
    starts = [r["t_start"] for r in measured if r.get("t_start") is not None]
    if not starts or not ended:
        return metrics, detail
    t0, t1 = min(starts), max(r["t_end"] for r in ended)
    window = t1 - t0
    detail["window_s"] = window
    if len(starts) >= 2 and max(starts) > t0:
        detail["sent_req_s"] = (len(starts) - 1) / (max(starts) - t0)
    late = [r["t_start"] - r["t_sched"] for r in measured
            if r.get("t_sched") is not None and r.get("t_start") is not None]
    if late:
        detail["send_late_ms_p99"] = percentile(late, 99) * 1e3
    if window <= 0 or not ok:
        return metrics, detail
    tokens = sum(int(r.get("completion_tokens") or 0) for r in ok)
    detail["measured_completion_tokens"] = tokens
    metrics["load_output_tok_s"] = tokens / window
    metrics["load_req_s"] = len(ok) / window
    series = {
        "ttft": [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None],
        "e2e": [r["e2e_ms"] for r in ok if r.get("e2e_ms") is not None],
        "itl": [x for r in ok for x in itl_values(r.get("chunk_ms") or [], tokens_of(r))],
    }
    for name, values in series.items():
        if values:
            for q in PERCENTILES:
                metrics[f"load_{name}_p{q}_ms"] = percentile(values, q)
    modes = sorted({str(r.get("tokens_per_chunk") or "one per chunk") for r in ok})
    detail["tokens_per_chunk"] = modes
    if slo and any(v is not None for v in slo.values()):
        good = sum(1 for r in measured if meets(r, slo))
        metrics["load_goodput"] = good / len(measured)
        metrics["load_goodput_req_s"] = good / window
        detail["slo"] = {k: v for k, v in slo.items() if v is not None}
    return metrics, detail
