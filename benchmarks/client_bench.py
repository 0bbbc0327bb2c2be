"""Client capacity under load (issue: load workloads). One command, a table printed:

    .venv/bin/python benchmarks/client_bench.py [--out docs/client-bench.md] [--quick]

abbench's load client (abbench/workload/load.py: aiohttp, one event loop) against
the reference server sending as fast as it can, the client pinned to one core and
the server to the other:

1. closed loop at concurrency 256, the server writing every token as soon as it
   can (one write per token, each stamped with the server's monotonic clock):
   achieved concurrency (the sum of request durations / window: 256 when the client
   keeps every stream going), output tok/s, client CPU (cores), and the timestamp
   error (client chunk time - server write time, same clock), for abbench's client
   and, as the alternatives, a thread per request (requests, the decode client's
   transport) and httpx's async client when it is installed;
2. the same with whole streams written at once (--burst): client parsing capacity;
3. open loop, Poisson arrivals at several rates: achieved against requested rate
   over the window, how late requests left, client CPU.

The load client's own parser and request records are used throughout; only the
transport differs between the rows of 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from abbench.campaign.environment import cpu_model  # noqa: E402
from abbench.model.load_window import aggregate, percentile  # noqa: E402
from abbench.server.ports import free_port  # noqa: E402
from abbench.workload import load  # noqa: E402
from abbench.workload.load import LoadJob, LoadResult, arrival_times, run_level  # noqa: E402

STAMP = re.compile(rb'"t": ([0-9.]+)')
PIN = False


class StampedStream(load._Stream):
    """The load client's parser, also noting client time - server stamp per chunk
    (a regex over the raw bytes: a few hundred ns a chunk, beside json's microseconds)."""

    errors: ClassVar[list[float]] = []

    def feed(self, data: bytes, now: float) -> None:
        super().feed(data, now)
        mono = time.monotonic() - (time.perf_counter() - now)  # ``now`` on the stamps' clock
        StampedStream.errors.extend(mono - float(m) for m in STAMP.findall(data))


@contextlib.contextmanager
def refserver(*flags: str) -> Iterator[str]:
    port = free_port("127.0.0.1")
    argv = [sys.executable, str(ROOT / "tests" / "refserver.py"), "--port", str(port),
            "--slots", "1024", *flags]
    cpus = os.cpu_count() or 1
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, preexec_fn=(
        lambda: os.sched_setaffinity(0, {1 % cpus})) if PIN else None)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            with contextlib.suppress(requests.RequestException):
                if requests.get(url + "/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait()


def jobs(n: int, tokens: int, times: list[float] | None = None) -> list[LoadJob]:
    body = {"prompt": list(range(16)), "max_tokens": tokens, "n_predict": tokens,
            "ignore_eos": True, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    return [LoadJob(i, False, json.dumps(body).encode(), f"{i:016x}",
                    None if times is None else times[i]) for i in range(n)]


# --------------------------------------------------------------- alternatives


def run_threads(url: str, js: list[LoadJob], concurrency: int) -> tuple[list[LoadResult],
                                                                         float, float, float]:
    """A thread per request in flight, each with its own requests session."""
    results = [LoadResult(j) for j in js]
    it = iter(results)
    lock = threading.Lock()

    def worker() -> None:
        s = requests.Session()
        while True:
            with lock:
                res = next(it, None)
            if res is None:
                return
            res.t_start = time.perf_counter()
            st = StampedStream(res)
            with s.post(url + "/v1/completions", data=res.job.body, stream=True,
                        headers={"Content-Type": "application/json"}, timeout=60) as r:
                for data in r.iter_content(chunk_size=None):
                    st.feed(data, time.perf_counter())
            res.t_end = time.perf_counter()
            res.status, res.reason = "ok", None

    c0, w0 = time.process_time(), time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, w0, time.perf_counter() - w0, time.process_time() - c0


def run_httpx(url: str, js: list[LoadJob], concurrency: int) -> tuple[list[LoadResult],
                                                                       float, float, float]:
    import httpx

    results = [LoadResult(j) for j in js]

    async def main() -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            it = iter(results)

            async def worker() -> None:
                for res in it:
                    res.t_start = time.perf_counter()
                    st = StampedStream(res)
                    async with client.stream("POST", url + "/v1/completions",
                                             content=res.job.body,
                                             headers={"Content-Type": "application/json"}) as r:
                        async for data in r.aiter_raw():
                            st.feed(data, time.perf_counter())
                    res.t_end = time.perf_counter()
                    res.status, res.reason = "ok", None

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    c0, w0 = time.process_time(), time.perf_counter()
    asyncio.run(main())
    return results, w0, time.perf_counter() - w0, time.process_time() - c0


def run_abbench(url: str, js: list[LoadJob], concurrency: int | None) -> tuple[
        list[LoadResult], float, float, float]:
    load._Stream = StampedStream  # type: ignore[misc]
    run = run_level(url, "/v1/completions", js, concurrency=concurrency, time_left=300)
    assert run.cut is None, run.cut
    return run.results, run.t0, run.wall_s, run.cpu_s


# -------------------------------------------------------------------- figures


def sched_wait() -> float:
    """Seconds this process's threads have spent runnable but waiting for a CPU
    (/proc schedstat): tells a starved client (a shared, loaded machine) from an idle
    one, which CPU time alone does not."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    w0 = sched_wait()
    out = fn(*args)
    return (*out, sched_wait() - w0)


def figures(results: list[LoadResult], t0: float, wall: float, cpu: float, waited: float,
            tokens: int) -> dict[str, Any]:
    recs = [r.record(t0, prompt_len=16, output_len=tokens) for r in results]
    bad = [r for r in recs if r["status"] != "ok"]
    assert not bad, bad[0]
    metrics, detail = aggregate(recs)
    window = detail["window_s"]
    busy = sum(r["e2e_ms"] for r in recs) / 1e3
    errs = StampedStream.errors
    out = {"tok_s": metrics["load_output_tok_s"], "cores": cpu / wall, "window": window,
           "waited": waited / wall,
           "in_flight": busy / window, "sent_req_s": detail.get("sent_req_s"),
           "late_p99_ms": detail.get("send_late_ms_p99"),
           "cpu_us_per_token": cpu / max(1, sum(r["completion_tokens"] for r in recs)) * 1e6}
    if errs:
        out["err_p50_ms"] = percentile(errs, 50) * 1e3
        out["err_p99_ms"] = percentile(errs, 99) * 1e3
    StampedStream.errors = []
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "client-bench.md"))
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    ap.add_argument("--pin", action="store_true", help="the client on core 0, the server on "
                    "core 1 (on a shared machine, pinning leaves each less CPU)")
    args = ap.parse_args()
    global PIN
    PIN = args.pin
    if PIN:
        os.sched_setaffinity(0, {0})
    c, tokens = 256, 64
    n = 512 if args.quick else 1536
    clients: list[tuple[str, Callable[..., Any]]] = [("abbench (aiohttp, one event loop)",
                                                      run_abbench),
                                                     ("a thread per request (requests)",
                                                      run_threads)]
    with contextlib.suppress(ImportError):
        import httpx  # noqa: F401

        clients.append(("httpx AsyncClient, one event loop", run_httpx))
    closed: list[tuple[str, dict[str, Any]]] = []
    with refserver("--rate", "0", "--stamp") as url:
        run_abbench(url, jobs(c, 8), c)  # connections and server threads up
        StampedStream.errors = []
        for name, fn in clients:
            closed.append((name, figures(*timed(fn, url, jobs(n, tokens), c), tokens)))
    with refserver("--rate", "0", "--burst") as url:
        run_abbench(url, jobs(c, 8), c)
        burst = figures(*timed(run_abbench, url, jobs(n, tokens * 4), c), tokens * 4)
    opened: list[tuple[float, dict[str, Any]]] = []
    m = 400 if args.quick else 1200
    with refserver("--rate", "0", "--stamp") as url:
        for rate in (50.0, 100.0, 200.0):
            times = arrival_times(0, m, rate, "poisson", random.Random(int(rate)))
            opened.append((rate, figures(*timed(run_abbench, url, jobs(m, 32, times), None),
                                         32)))
    load1 = os.getloadavg()[0]
    lines = [f"Client capacity, {dt.date.today()}, {cpu_model()} ({os.cpu_count()} cores, "
             f"load average {load1:.1f} at the end: the machine is shared), Python "
             f"{platform.python_version()}; `python benchmarks/client_bench.py"
             f"{' --quick' if args.quick else ''}{' --pin' if args.pin else ''}` under nice; "
             + ("client pinned to core 0, the reference server (tests/refserver.py, Python "
                "threads) to core 1." if args.pin else "client (one thread: it can use one "
                "core at most) and reference server (tests/refserver.py, Python threads) "
                "unpinned."), "",
             f"1. Closed loop, concurrency {c}, {n} requests of {tokens} tokens, one write per "
             "token as fast as the server can:", "",
             "| client | achieved concurrency | output tok/s | client CPU (cores) | waiting "
             "for a CPU | CPU per token | one core's capacity | timestamp error p50 / p99 |",
             "|---|---|---|---|---|---|---|---|"]
    for name, f in closed:
        lines.append(f"| {name} | {f['in_flight']:.1f} of {c} | {f['tok_s']:,.0f} | "
                     f"{f['cores']:.2f} | {f['waited'] * 100:.0f}% | "
                     f"{f['cpu_us_per_token']:.1f} µs | "
                     f"{1e6 / f['cpu_us_per_token']:,.0f} tok/s | "
                     f"{f['err_p50_ms']:.2f} / {f['err_p99_ms']:.2f} ms |")
    lines += ["", f"2. Closed loop, concurrency {c}, {n} requests of {tokens * 4} tokens, each "
              "stream written at once (--burst), abbench's client:", "",
              "| achieved concurrency | output tok/s | client CPU (cores) | waiting for a CPU "
              "| CPU per token | one core's capacity |", "|---|---|---|---|---|---|",
              f"| {burst['in_flight']:.1f} of {c} | {burst['tok_s']:,.0f} | "
              f"{burst['cores']:.2f} | {burst['waited'] * 100:.0f}% | "
              f"{burst['cpu_us_per_token']:.1f} µs | "
              f"{1e6 / burst['cpu_us_per_token']:,.0f} tok/s |", "",
              f"3. Open loop, Poisson arrivals, {m} requests of 32 tokens each, abbench's "
              "client:", "",
              "| requested rate | achieved rate (window) | send late p99 | in flight (mean) | "
              "client CPU (cores) | waiting for a CPU | timestamp error p50 / p99 |",
              "|---|---|---|---|---|---|---|"]
    for rate, f in opened:
        lines.append(f"| {rate:g} req/s | {f['sent_req_s']:.2f} req/s "
                     f"({(f['sent_req_s'] / rate - 1) * 100:+.2f}%) | "
                     f"{f['late_p99_ms']:.2f} ms | {f['in_flight']:.1f} | {f['cores']:.2f} | "
                     f"{f['waited'] * 100:.0f}% | "
                     f"{f['err_p50_ms']:.2f} / {f['err_p99_ms']:.2f} ms |")
    ab, th = closed[0][1], closed[1][1]
    best_server = max(f["tok_s"] for _, f in closed)
    lines += ["", "Reading: abbench's client is one thread on one event loop: it uses one core at "
              "most. What carries to another machine is its CPU per token: "
              f"{ab['cpu_us_per_token']:.1f} µs with one write per token and "
              f"{burst['cpu_us_per_token']:.1f} µs with whole streams, so one core keeps up "
              f"with {1e6 / ab['cpu_us_per_token']:,.0f} to "
              f"{1e6 / burst['cpu_us_per_token']:,.0f} tok/s, above the "
              f"{best_server:,.0f} tok/s the reference server reached here at {c} streams. "
              f"A thread per request cost {th['cpu_us_per_token'] / ab['cpu_us_per_token']:.1f}x "
              f"the CPU per token and kept only {th['in_flight']:.0f} of {c} streams going "
              f"with {th['cores']:.2f} cores (its threads queue for the GIL); httpx cost "
              + (f"{closed[2][1]['cpu_us_per_token'] / ab['cpu_us_per_token']:.0f}x. "
                 if len(closed) > 2 else "(not installed). ")
              + "'Waiting for a CPU' is the time the client was runnable but not running "
              "(/proc schedstat): on a shared machine, time in which its timestamps run late "
              "and requests look in flight longer; the timestamp errors above are that, not "
              "the client's parsing. Open loop: the achieved rate over the window is the rate "
              "asked for while the client gets the CPU it needs."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
