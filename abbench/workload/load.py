"""Load levels: many streamed completions at once, on one asyncio event loop.

A level is one concurrency (closed loop: that many requests always in flight, each
worker sending its next request when the last one ends) or one arrival rate (open
loop: requests sent at seeded Poisson or constant times, whatever is in flight).
Its warm-up requests go first, in the same stream, and are stored but left out
of the metrics; the level is bounded by its request count and by the time the
load workload has left.

The client is aiohttp on one event loop, not a thread per request: at 256 streams
it keeps up with the reference server on one core where threads did not
(benchmarks/client_bench.py, docs/client-bench.md). Each content chunk is
timestamped (perf_counter) as its bytes come off the socket; several SSE events
in one read share the read's time.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from abbench.config.workloads import Arrival, LoadLevel, LoadSpec, Workload
from abbench.errors import RequestError
from abbench.model.load_window import aggregate, chunk_tokens
from abbench.server.http import AsyncClientError, AsyncSession, async_session
from abbench.workload import wire
from abbench.workload.decode import Client, PromptMaker


@dataclass
class LoadJob:
    """One request of a level, prepared before the level starts (prompt tokenized,
    body encoded), so that nothing but sending happens inside the window."""

    index: int
    warmup: bool
    body: bytes
    nonce: str
    #: open loop: when to send it, seconds after the level starts
    t_sched: float | None = None


@dataclass
class LoadResult:
    """What one request did; times are perf_counter seconds."""

    job: LoadJob
    t_start: float | None = None
    t_end: float | None = None
    chunk_t: list[float] = field(default_factory=list)
    reported: list[int] = field(default_factory=list)
    reported_ok: bool = True
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    status: str = "failed"
    reason: str | None = "not sent"
    #: prompt tokens the server says came from its cache (None: it did not say)
    cached_tokens: int | None = None

    def record(self, t0: float, *, prompt_len: int, output_len: int) -> dict[str, Any]:
        """The stored ``load_request`` fields (times relative to the level start, s;
        latencies in ms from this request's send)."""
        job = self.job
        rec: dict[str, Any] = {"index": job.index, "warmup": job.warmup, "nonce": job.nonce,
                               "t_sched": job.t_sched}
        rec["t_start"] = None if self.t_start is None else self.t_start - t0
        rec["t_end"] = None if self.t_end is None else self.t_end - t0
        sent = self.t_start
        chunk_ms = [] if sent is None else [round((t - sent) * 1e3, 4) for t in self.chunk_t]
        rec["ttft_ms"] = chunk_ms[0] if chunk_ms else None
        rec["e2e_ms"] = None if sent is None or self.t_end is None else \
            round((self.t_end - sent) * 1e3, 4)
        rec["prompt_tokens"] = self.prompt_tokens
        rec["completion_tokens"] = self.completion_tokens
        ks, mode = chunk_tokens(len(chunk_ms), self.completion_tokens,
                                self.reported if self.reported_ok and self.reported else None)
        rec["chunk_ms"] = chunk_ms
        if any(k != 1 for k in ks):
            rec["chunk_tokens"] = ks
        rec["tokens_per_chunk"] = mode
        status, reason = self.status, self.reason
        if status == "ok":
            wrong = []
            if self.prompt_tokens is not None and self.prompt_tokens != prompt_len:
                wrong.append(f"prompt_tokens {self.prompt_tokens} != {prompt_len}")
            if self.completion_tokens is None:
                wrong.append("the server sent no usage (completion token count)")
            elif self.completion_tokens != output_len:
                wrong.append(f"completion_tokens {self.completion_tokens} != {output_len}")
            if not chunk_ms:
                wrong.append("no content chunk")
            if wrong:
                status, reason = "invalid", "; ".join(wrong)
        rec["status"], rec["reason"] = status, reason
        return rec


def cached_tokens(chunk: wire.Chunk) -> int | None:
    """The prompt tokens a chunk says came from the server's cache: llama.cpp
    ``timings.cache_n``, vLLM/SGLang ``usage.prompt_tokens_details.cached_tokens``
    (with --enable-prompt-tokens-details / --enable-cache-report), SGLang
    ``meta_info.cached_tokens``; None when it says nothing."""
    if chunk.timings is not None and chunk.timings.cache_n is not None:
        return chunk.timings.cache_n
    candidates: list[Any] = []
    if chunk.usage is not None:
        details = (chunk.usage.model_extra or {}).get("prompt_tokens_details")
        if isinstance(details, dict):
            candidates.append(details.get("cached_tokens"))
    if chunk.meta_info is not None:
        candidates.append(chunk.meta_info.get("cached_tokens"))
    for v in candidates:
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return None


class _Stream:
    """Incremental SSE parser of one response (:class:`.wire.SseReader`): content chunk
    times and token counts."""

    __slots__ = ("cum", "reader", "res")

    def __init__(self, res: LoadResult):
        self.reader = wire.SseReader()
        self.res = res
        self.cum = 0

    @property
    def done(self) -> bool:
        return self.reader.done

    def feed(self, data: bytes, now: float) -> None:
        res = self.res
        for chunk in self.reader.feed(data):
            usage = chunk.usage
            if any(choice.content for choice in chunk.choices or ()):
                res.chunk_t.append(now)
                toks = chunk.tokens
                if toks is not None:
                    res.reported.append(len(toks))
                elif usage is not None and usage.completion_tokens is not None:
                    # vLLM's continuous usage stats
                    res.reported.append(usage.completion_tokens - self.cum)
                    self.cum = usage.completion_tokens
                else:
                    res.reported_ok = False
            if usage is not None:
                if usage.completion_tokens is not None:
                    res.completion_tokens = usage.completion_tokens
                if usage.prompt_tokens is not None:
                    res.prompt_tokens = usage.prompt_tokens
            timings = chunk.timings
            if timings is not None and res.completion_tokens is None \
                    and timings.predicted_n is not None:
                res.completion_tokens = timings.predicted_n
            if usage is not None or timings is not None or chunk.meta_info is not None:
                cached = cached_tokens(chunk)
                if cached is not None:
                    res.cached_tokens = cached


async def _send(session: AsyncSession, url: str, res: LoadResult) -> None:
    res.t_start = time.perf_counter()
    res.status, res.reason = "failed", "no response"
    stream = _Stream(res)
    try:
        async with session.post(url, data=res.job.body,
                                headers={"Content-Type": "application/json"}) as r:
            if r.status != 200:
                text = (await r.text(errors="replace"))[:300]
                res.reason = f"HTTP {r.status}: {text}"
                return
            async for data in r.content.iter_any():
                stream.feed(data, time.perf_counter())
            stream.reader.close()
            res.t_end = time.perf_counter()
        res.status, res.reason = "ok", None
    except RequestError as e:
        res.reason = e.message
    except asyncio.TimeoutError:
        res.reason = "no data for request_timeout seconds"
    except AsyncClientError as e:
        res.reason = f"connection failed: {type(e).__name__}: {e}"
    except asyncio.CancelledError:
        res.reason = "cut"
        raise


#: one request sent and streamed into its :class:`LoadResult` (the replay workloads'
#: sender too, abbench/workload/sessions.py)
send_request = _send


@dataclass
class LevelRun:
    """One level's requests and how the level ended."""

    results: list[LoadResult]
    t0: float
    wall_s: float
    cpu_s: float
    #: why the level ended before all its requests did (timeout, interrupt), else None
    cut: str | None = None


async def _closed(session: AsyncSession, url: str, results: list[LoadResult],
                  concurrency: int) -> None:
    queue = iter(results)

    async def worker() -> None:
        for res in queue:  # one shared iterator: each worker takes the next request
            await _send(session, url, res)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(results)))))


async def _open(session: AsyncSession, url: str, results: list[LoadResult],
                t0: float, max_concurrency: int | None) -> None:
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(res: LoadResult) -> None:
        if sem is None:
            await _send(session, url, res)
            return
        async with sem:
            await _send(session, url, res)

    tasks = []
    try:
        for res in results:
            delay = t0 + (res.job.t_sched or 0.0) - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(res)))
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def until_done(main: asyncio.Future[None], stop: Callable[[], bool], time_left: float,
                     timeout_says: str) -> str | None:
    """Wait for ``main`` at most ``time_left`` s, or until ``stop()``: None when it
    ended, else why it was cancelled; its own exception is raised."""

    async def watch() -> None:
        while not stop():
            await asyncio.sleep(0.05)

    watcher = asyncio.ensure_future(watch())
    done, _ = await asyncio.wait({main, watcher}, timeout=max(time_left, 0.0),
                                 return_when=asyncio.FIRST_COMPLETED)
    cut = None
    if main not in done:
        cut = "interrupted" if watcher in done else timeout_says
        main.cancel()
    watcher.cancel()
    await asyncio.gather(main, watcher, return_exceptions=True)
    if main in done and main.exception() is not None:
        raise main.exception()  # type: ignore[misc]
    return cut


def mark_cut(results: Sequence[LoadResult], cut: str | None) -> None:
    """Say in each unfinished request's reason that the level or replay was cut."""
    for res in results:
        if cut and res.status != "ok":
            res.reason = f"{res.reason or 'not sent'} ({cut})" if res.t_start is None else \
                f"cut: {cut}"


async def _level(url: str, results: list[LoadResult], *, concurrency: int | None,
                 max_concurrency: int | None, request_timeout: float, time_left: float,
                 stop: Callable[[], bool]) -> tuple[float, str | None]:
    async with async_session(request_timeout) as session:
        t0 = time.perf_counter()
        if concurrency is not None:
            main = asyncio.ensure_future(_closed(session, url, results, concurrency))
        else:
            main = asyncio.ensure_future(_open(session, url, results, t0, max_concurrency))

        cut = await until_done(main, stop, time_left, "the load workload's timeout ran out")
    return t0, cut


def run_level(base_url: str, path: str, jobs: Sequence[LoadJob], *,
              concurrency: int | None = None, max_concurrency: int | None = None,
              request_timeout: float = 600.0, time_left: float = 600.0,
              stop_event: threading.Event | None = None) -> LevelRun:
    """Send ``jobs`` closed-loop at ``concurrency``, or open-loop at their ``t_sched``
    (``concurrency`` None), on a fresh event loop in this thread."""
    results = [LoadResult(job) for job in jobs]
    stop = stop_event.is_set if stop_event is not None else (lambda: False)
    c0, w0 = time.process_time(), time.perf_counter()
    t0, cut = asyncio.run(_level(base_url + path, results, concurrency=concurrency,
                                 max_concurrency=max_concurrency,
                                 request_timeout=request_timeout, time_left=time_left,
                                 stop=stop))
    mark_cut(results, cut)
    return LevelRun(results, t0, time.perf_counter() - w0, time.process_time() - c0, cut)


# ------------------------------------------------------------ arrivals, jobs


def arrival_times(warmup: int, n: int, rate: float, process: str,
                  rng: random.Random) -> list[float]:
    """Send times (s from the level start) of ``warmup`` then ``n`` measured requests.

    Warm-up requests go every 1/rate; the first measured one 1/rate after the last of
    them. constant: every 1/rate. poisson: exponential gaps, scaled so that the n - 1
    gaps between measured requests span exactly (n - 1) / rate: the window's rate is
    the rate asked for, its burstiness Poisson's (a Poisson process given its count).
    """
    out = [i / rate for i in range(warmup)]
    t = warmup / rate
    if n <= 0:
        return out
    out.append(t)
    if process == "constant" or n == 1:
        return out + [t + i / rate for i in range(1, n)]
    gaps = [rng.expovariate(1.0) for _ in range(n - 1)]
    scale = (n - 1) / rate / sum(gaps)
    for g in gaps:
        t += g * scale
        out.append(t)
    return out


def level_arrivals(spec: LoadSpec, level: LoadLevel, run_seed: int, round_: int,
                   workload: int, rep: int) -> list[float] | None:
    """An open-loop level's send times (None for closed loop), warm-up included.

    Seeded by the round, not the slot: every arm of a round gets the same times."""
    arrival = spec.arrival
    if not isinstance(arrival, Arrival) or level.rate is None:
        return None
    seed = arrival.seed if arrival.seed is not None else run_seed
    rng = random.Random(f"abbench-arrivals:{seed}:{round_}:{workload}:{level.index}:{rep}")
    return arrival_times(spec.warmup_for(level), spec.requests, level.rate, arrival.process,
                         rng)


def make_jobs(client: Client, prompts: PromptMaker, workload: Workload, level: LoadLevel,
              times: list[float] | None) -> list[LoadJob]:
    """The level's warm-up and measured requests, with exact-length prompts."""
    spec = workload.load
    assert spec is not None
    warm = spec.warmup_for(level)
    jobs = []
    for i in range(warm + spec.requests):
        ids, nonce = prompts.prompt(spec.prompt_tokens)
        body = json.dumps(client.request_body(ids, spec.output_tokens)).encode()
        jobs.append(LoadJob(i, i < warm, body, nonce, None if times is None else times[i]))
    return jobs


@dataclass
class LevelOutcome:
    """A measured level, ready to be stored: each request, then the level's sample."""

    requests: list[dict[str, Any]]
    metrics: dict[str, float]
    detail: dict[str, Any]
    valid: bool
    reason: str | None


def measure_level(client: Client, prompts: PromptMaker, workload: Workload, level: LoadLevel,
                  *, times: list[float] | None, time_left: float,
                  stop_event: threading.Event | None = None) -> LevelOutcome:
    """Prepare, send and aggregate one level (one rep)."""
    spec = workload.load
    assert spec is not None
    if time_left <= 0:  # nothing prepared or sent
        return LevelOutcome([], {"load_failed": float(spec.requests)},
                            {"level": level.label, "requests": spec.requests, "ok": 0}, False,
                            "the load workload's timeout ran out before this level")
    jobs = make_jobs(client, prompts, workload, level, times)
    run = run_level(client.base_url, client.arm.completions_path, jobs,
                    concurrency=level.concurrency,
                    max_concurrency=None if isinstance(spec.arrival, str)
                    else spec.arrival.max_concurrency,
                    request_timeout=client.arm.request_timeout, time_left=time_left,
                    stop_event=stop_event)
    reqs = [r.record(run.t0, prompt_len=spec.prompt_tokens, output_len=spec.output_tokens)
            for r in run.results]
    slo = workload.slo.model_dump() if workload.slo else None
    metrics, detail = aggregate(reqs, slo)
    detail.update(level=level.label, wall_s=run.wall_s, client_cpu_s=run.cpu_s,
                  warmup=spec.warmup_for(level),
                  client_cpu_share=run.cpu_s / run.wall_s if run.wall_s > 0 else None)
    # every token received in the window, warm-up included (collectors' denominators)
    detail["completion_tokens"] = sum(int(r.get("completion_tokens") or 0) for r in reqs)
    measured = [r for r in reqs if not r["warmup"]]
    bad = [r for r in measured if r["status"] != "ok"]
    reasons = []
    if run.cut:
        reasons.append(f"{run.cut}: {len(measured) - len(bad)} of {len(measured)} "
                       "requests finished")
    elif bad:
        why: dict[str, int] = {}
        for r in bad:
            why[str(r["reason"])] = why.get(str(r["reason"]), 0) + 1
        reasons.append(f"{len(bad)} of {len(measured)} requests failed: " + "; ".join(
            f"{k} (x{v})" if v > 1 else k for k, v in list(why.items())[:3]))
    valid = not run.cut and len(bad) < len(measured) and "load_output_tok_s" in metrics
    if not valid and not reasons:
        reasons.append("no request succeeded")
    return LevelOutcome(reqs, metrics, detail, valid, "; ".join(reasons) or None)
