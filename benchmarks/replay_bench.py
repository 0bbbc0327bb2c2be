"""Replay client capacity (issue 28, item 6). One command, a table printed:

    .venv/bin/python benchmarks/replay_bench.py [--out docs/replay-bench.md] [--quick]

The trace replay's client (abbench/workload/sessions.py: each conversation a task on
an event loop; with ``workers: N`` N spawned processes, conversations dealt
round-robin) replaying a Mooncake-style trace of independent requests at Poisson
times against the reference server writing whole streams at once (--burst), so that
the client's own cost shows: output tok/s reached against asked, how late requests
left (p99), and the client's CPU per streamed token (all processes), which gives
one core's capacity (1 / CPU per token) and where N processes saturate (N cores'
worth, on a host with the cores).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abbench.campaign.environment import cpu_model  # noqa: E402
from abbench.model.load_window import aggregate  # noqa: E402
from abbench.server.http import async_session  # noqa: E402
from abbench.workload.load import LoadJob, LoadResult, until_done  # noqa: E402
from abbench.workload.sessions import _in_workers, _replay  # noqa: E402
from abbench.workload.trace import Segment, TraceRequest  # noqa: E402
from benchmarks.client_bench import refserver  # noqa: E402


def trace(n: int, rate: float, tokens: int, seed: int = 1) -> tuple[
        list[list[TraceRequest]], dict[int, LoadResult]]:
    rng = random.Random(seed)
    t, convs, jobs = 0.0, [], {}
    body = {"prompt": list(range(16)), "max_tokens": tokens, "n_predict": tokens,
            "ignore_eos": True, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    raw = json.dumps(body).encode()
    for i in range(n):
        r = TraceRequest(i, (Segment(f"r{i}", 16),), tokens, t_ms=t * 1e3, session=f"r{i}")
        convs.append([r])
        jobs[i] = LoadResult(LoadJob(i, False, raw, f"r{i}"))
        t += rng.expovariate(rate)
    return convs, jobs


def replay(url: str, n: int, rate: float, tokens: int, workers: int) -> dict[str, Any]:
    convs, jobs = trace(n, rate, tokens)
    full = url + "/v1/completions"
    c0, w0 = time.process_time(), time.perf_counter()
    if workers == 1:
        t0 = time.perf_counter()

        async def main() -> str | None:
            async with async_session(300) as session:
                task = asyncio.ensure_future(_replay(session, full, convs, jobs, t0, 1.0, None))
                return await until_done(task, lambda: False, 600, "timeout")

        cut = asyncio.run(main())
        cpus = [time.process_time() - c0]
    else:
        box: list[float] = []
        cut, cpus = _in_workers(full, 300, convs, jobs, box, 1.0, None, workers, 600,
                                lambda: False)
        t0 = box[0]
    wall = time.perf_counter() - t0
    assert cut is None, cut
    recs = [jobs[i].record(t0, prompt_len=16, output_len=tokens) for i in range(n)]
    bad = [r for r in recs if r["status"] != "ok"]
    assert not bad, bad[0]
    metrics, detail = aggregate(recs)
    streamed = sum(r["completion_tokens"] for r in recs)
    return {"asked": rate * tokens, "tok_s": metrics["load_output_tok_s"],
            "late_p99_ms": detail.get("send_late_ms_p99"), "busiest": max(cpus) / wall,
            "cpu_us": sum(cpus) / streamed * 1e6, "wall": time.perf_counter() - w0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "replay-bench.md"))
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    args = ap.parse_args()
    tokens, seconds = 256, 3 if args.quick else 8
    rows = []
    with refserver("--burst") as url:
        for rate in (50.0, 100.0, 200.0):
            for workers in (1, 2):
                n = int(rate * seconds)
                f = replay(url, n, rate, tokens, workers)
                rows.append((rate, workers, n, f))
                print(rate, workers, {k: round(v, 2) for k, v in f.items() if v}, flush=True)
    load = os.getloadavg()[0]
    head = (f"Replay client capacity, {dt.date.today()}, {cpu_model()} ({os.cpu_count()} cores, "
            f"load average {load:.1f} at the end: the machine is shared), Python "
            f"{platform.python_version()}; `python benchmarks/replay_bench.py`; reference "
            "server (tests/refserver.py --burst, whole streams at once) beside the client.\n\n"
            f"Open loop, Poisson arrivals, {seconds} s of requests of {tokens} output tokens, "
            "each its own conversation:\n\n"
            "| asked | client processes | requests | output tok/s reached | send late p99 | "
            "busiest process (cores) | CPU per token (all processes) | one core's capacity |\n"
            "|---|---|---|---|---|---|---|---|\n")
    lines = [f"| {f['asked']:,.0f} tok/s ({rate:g} req/s) | {w} | {n} | {f['tok_s']:,.0f} | "
             f"{f['late_p99_ms'] or 0:.1f} ms | {f['busiest']:.2f} | {f['cpu_us']:.1f} µs | "
             f"{1e6 / f['cpu_us']:,.0f} tok/s |" for rate, w, n, f in rows]
    text = head + "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
