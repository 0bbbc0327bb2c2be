"""Replays of ``trace:`` and ``sessions:`` workloads: the same token-exact traffic for
every arm and round, sent on one event loop, measured per request.

A conversation's turns go one after another (each ``think_ms`` after the last one
ended, scaled by ``speed``); conversations start at their timestamps; side calls are
sent without waiting. Prompts are token ids (:class:`.trace.TokenBook`), so the
server's prefix cache sees exactly the reuse the trace designs; each request's
record keeps its designed reused tokens beside the server's cached-token count
(llama.cpp ``timings.cache_n``, vLLM/SGLang ``usage.prompt_tokens_details.cached_tokens``,
SGLang ``meta_info.cached_tokens``). Metrics: :func:`replay_metrics`.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from abbench.config.traffic import SessionsSpec, TraceSpec
from abbench.config.workloads import Workload
from abbench.model.load_window import PERCENTILES, aggregate, percentile
from abbench.server.http import AsyncSession, async_session
from abbench.workload.decode import Client, PromptMaker
from abbench.workload.load import (
    LevelOutcome,
    LoadJob,
    LoadResult,
    mark_cut,
    send_request,
    until_done,
)
from abbench.workload.trace import (
    Segment,
    TokenBook,
    Trace,
    TraceRequest,
    designed_reuse,
    read_trace,
    sessions_trace,
    shared_prefixes,
    start_ms,
    window,
)
from abbench.workload.tracegen import SessionsShape, make_sessions, planned_order

#: output tokens of each ``cache: warm`` request (it only has to fill the cache)
WARM_OUTPUT = 2
#: seconds the client processes may take to start (a spawned Python imports abbench
#: first: 20 s were seen on a loaded 2-core machine); time 0 is once all have
WORKER_START_S = 120.0


def sessions_shape(spec: SessionsSpec) -> SessionsShape:
    return SessionsShape(sessions=spec.count, turns=spec.turns, prefix_tokens=spec.prefix_tokens,
                         user_tokens=spec.user_tokens, output_tokens=spec.output_tokens,
                         think_s=spec.think, rate=spec.rate, side_share=spec.side_share,
                         side_tokens=spec.side_tokens, side_output=spec.side_output)


def workload_trace(workload: Workload, base_dir: Path, seed: int) -> Trace:
    """The workload's traffic: its trace file read (and cut to ``first``), or its
    sessions made by the seeded generator."""
    spec = workload.replay
    if isinstance(spec, TraceSpec):
        path = Path(spec.file)
        path = path if path.is_absolute() else base_dir / path
        trace = read_trace(path, spec.format, spec.block_tokens)
        return window(trace, first_ms=None if spec.first is None else spec.first * 1e3)
    assert isinstance(spec, SessionsSpec)
    rows = make_sessions(sessions_shape(spec), seed)
    return sessions_trace([(str(r["session"]), int(r["turn"]), r, f"sessions[{i}]")
                           for i, r in enumerate(rows)], "sessions:")


@dataclass
class Plan:
    """A replay ready to send: the requests in planned order, what ``warm`` sends
    first, and each request's designed reused tokens."""

    trace: Trace
    order: list[TraceRequest]
    warm: list[tuple[Segment, ...]]
    designed: dict[int, int]
    #: each request's place in the planned order, as a share (0 first, 1 last)
    position: dict[int, float]


def make_plan(trace: Trace, cache: str) -> Plan:
    order = planned_order(trace)
    warm = shared_prefixes(order) if cache == "warm" else []
    reuse = designed_reuse(order, warm)
    last = max(len(order) - 1, 1)
    return Plan(trace, order, warm, {r.index: k for r, k in zip(order, reuse, strict=True)},
                {r.index: i / last for i, r in enumerate(order)})


def request_body(client: Client, ids: list[int], output: int) -> bytes:
    """An exact-length streamed completion whose prompt cache the server's own setting
    decides: llama.cpp's preset sends ``cache_prompt: false`` (decode rows measure no
    cache), which a replay leaves out, so the server's default (on; off with
    ``--no-cache-prompt``) holds. An arm's own ``request_extra: {cache_prompt: ...}``
    other than the preset's is kept."""
    body = client.request_body(ids, output)
    preset_value = client.preset.request_extra.get("cache_prompt", object())
    if "cache_prompt" in body and body["cache_prompt"] == preset_value:
        del body["cache_prompt"]
    return json.dumps(body).encode()


def prompt_digest(ids: Sequence[int]) -> str:
    """A short digest of a prompt's token ids (crc32 of their decimal list)."""
    return f"{zlib.crc32(','.join(map(str, ids)).encode()):08x}"


@dataclass
class ReplayRun:
    results: list[LoadResult]
    requests: list[TraceRequest]
    t0: float
    wall_s: float
    cpu_s: float
    cut: str | None = None
    warm_failed: list[str] = field(default_factory=list)


async def _replay(session: AsyncSession, url: str, conversations: list[list[TraceRequest]],
                  jobs: dict[int, LoadResult], t0: float, speed: float,
                  concurrency: int | None) -> None:
    sem = asyncio.Semaphore(concurrency) if concurrency else None
    side_tasks: list[asyncio.Future[None]] = []

    async def conversation(turns: Sequence[TraceRequest]) -> None:
        start = start_ms(turns)
        if start is not None:
            delay = t0 + start / 1e3 / speed - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        if sem is not None:
            await sem.acquire()
        try:
            for r in turns:
                # planned send: the think time after the last turn ended, not before the
                # turn's timestamp; t_sched keeps it (t_start - t_sched: how late it left)
                due = t0 if r is turns[0] else time.perf_counter() + r.think_ms / 1e3 / speed
                if r.t_ms is not None:
                    due = max(due, t0 + r.t_ms / 1e3 / speed)
                wait = due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                jobs[r.index].job.t_sched = due - t0
                if r.side:
                    side_tasks.append(asyncio.ensure_future(
                        send_request(session, url, jobs[r.index])))
                else:
                    await send_request(session, url, jobs[r.index])
        finally:
            if sem is not None:
                sem.release()

    convs = [asyncio.ensure_future(conversation(rs)) for rs in conversations]
    try:
        await asyncio.gather(*convs)
        await asyncio.gather(*side_tasks)
    finally:
        for t in (*convs, *side_tasks):
            t.cancel()
        await asyncio.gather(*convs, *side_tasks, return_exceptions=True)


def run_replay(client: Client, prompts: PromptMaker, plan: Plan, *, seed: int, speed: float,
               concurrency: int | None, time_left: float, workers: int = 1,
               stop_event: threading.Event | None = None) -> ReplayRun:
    """Prepare every prompt (token ids, bodies), send the warm prefixes, then replay
    on this thread's event loop, or spread over ``workers`` client processes."""
    head = client.special_prefix()
    book = TokenBook(prompts.filler(4096), seed)
    reqs = plan.trace.requests
    jobs: dict[int, LoadResult] = {}
    for r in reqs:
        ids = book.prompt(r.segments, head)
        # the nonce field names the prompt: its turn and a digest of its token ids
        # (the same for every arm and round: the report's test of identical traffic)
        name = f"{r.session}#{r.turn}{'/side' if r.side else ''}:{prompt_digest(ids)}"
        jobs[r.index] = LoadResult(LoadJob(r.index, False,
                                           request_body(client, ids, r.output_length), name))
    warm = [LoadResult(LoadJob(-1 - i, True, request_body(
        client, book.prompt(p, head), WARM_OUTPUT), "warm")) for i, p in enumerate(plan.warm)]
    stop = stop_event.is_set if stop_event is not None else (lambda: False)
    url = client.base_url + client.arm.completions_path
    timeout = client.arm.request_timeout
    conversations = list(plan.trace.sessions().values())
    c0, w0 = time.process_time(), time.perf_counter()
    t0_box: list[float] = []

    async def main() -> str | None:
        async with async_session(timeout) as session:
            for w in warm:
                await send_request(session, url, w)
            if workers > 1:
                return None
            t0_box.append(time.perf_counter())
            task = asyncio.ensure_future(_replay(session, url, conversations, jobs, t0_box[0],
                                                 speed, concurrency))
            return await until_done(task, stop, time_left - (time.perf_counter() - w0),
                                    "the replay's timeout ran out")

    cut = asyncio.run(main())
    cpu = time.process_time() - c0
    if workers > 1:
        cut, cpu_workers = _in_workers(url, timeout, conversations, jobs, t0_box, speed,
                                       concurrency, workers, time_left - (time.perf_counter() - w0),
                                       stop)
        cpu = max([cpu, *cpu_workers])
    results = [jobs[r.index] for r in reqs]
    mark_cut(results, cut)
    wall = time.perf_counter() - w0
    return ReplayRun(results, list(reqs), t0_box[0] if t0_box else w0, wall, cpu, cut,
                     [w.reason or w.status for w in warm if w.status != "ok"])


def _worker(url: str, timeout: float, conversations: list[list[TraceRequest]],
            jobs: dict[int, LoadResult], speed: float, concurrency: int | None,
            time_left: float, conn: Connection) -> None:
    """One client process: says it is ready, gets time 0, replays its share of the
    conversations on its own event loop, sends the results back through ``conn``
    (perf_counter is the system's monotonic clock, the same in every process)."""
    conn.send("ready")
    t0 = conn.recv()
    c0 = time.process_time()

    async def main() -> str | None:
        async with async_session(timeout) as session:
            task = asyncio.ensure_future(_replay(session, url, conversations, jobs, t0, speed,
                                                 concurrency))
            return await until_done(task, lambda: False, time_left,
                                    "the replay's timeout ran out")

    cut = asyncio.run(main())
    conn.send((cut, jobs, time.process_time() - c0))
    conn.close()


def _in_workers(url: str, timeout: float, conversations: list[list[TraceRequest]],
                jobs: dict[int, LoadResult], t0_box: list[float], speed: float,
                concurrency: int | None, workers: int, time_left: float,
                stop: Callable[[], bool]) -> tuple[str | None, list[float]]:
    """The replay spread over ``workers`` processes (conversations dealt round-robin,
    ``concurrency`` shared out): time 0 (put in ``t0_box``) once all of them have
    started; their results merged into ``jobs``. Returns why it was cut (or None) and
    each process's CPU seconds."""
    mp = multiprocessing.get_context("spawn")
    share = None if concurrency is None else -(-concurrency // workers)
    procs: list[tuple[BaseProcess, Connection]] = []
    for k in range(workers):
        mine = conversations[k::workers]
        part = {r.index: jobs[r.index] for rs in mine for r in rs}
        here, there = mp.Pipe()
        proc = mp.Process(target=_worker, args=(url, timeout, mine, part, speed, share,
                                                time_left, there), daemon=True)
        proc.start()
        there.close()
        procs.append((proc, here))
    cut: str | None = None
    cpus: list[float] = []
    deadline = time.perf_counter() + WORKER_START_S
    try:
        for p, conn in procs:  # each says it is ready (a spawned Python imports first)
            while not conn.poll(0.05):
                if stop():
                    return "interrupted", cpus
                if time.perf_counter() > deadline or not p.is_alive():
                    return "a client process did not start", cpus
            conn.recv()
        t0_box.append(time.perf_counter() + 0.05)
        for _, conn in procs:
            conn.send(t0_box[0])
        deadline = time.perf_counter() + time_left + 30
        for p, conn in procs:
            while not conn.poll(0.05):
                if stop():
                    return "interrupted", cpus
                if time.perf_counter() > deadline or (not p.is_alive() and not conn.poll(0)):
                    return cut or "a client process ended without its results", cpus
            try:
                their_cut, their_jobs, cpu = conn.recv()
            except EOFError:
                return "a client process ended without its results", cpus
            jobs.update(their_jobs)
            cut = cut or their_cut
            cpus.append(cpu)
        return cut, cpus
    finally:
        for p, conn in procs:
            conn.close()
            if p.is_alive():
                p.terminate()
            p.join(timeout=5)


# ----------------------------------------------------------------- metrics


def replay_records(run: ReplayRun, plan: Plan) -> list[dict[str, Any]]:
    """The stored ``load_request`` records, with session, turn, designed reuse and the
    server's cached tokens."""
    out = []
    for res, r in zip(run.results, run.requests, strict=True):
        rec = res.record(run.t0, prompt_len=r.input_length, output_len=r.output_length)
        rec.update(session=r.session, turn=r.turn, side=r.side,
                   designed_cached=plan.designed.get(r.index, 0), input_length=r.input_length,
                   planned_pos=plan.position.get(r.index))
        rec["cached_tokens"] = res.cached_tokens
        out.append(rec)
    return out


def steady_window(records: Sequence[dict[str, Any]], steady: tuple[float, float]
                  ) -> list[dict[str, Any]]:
    """The records with requests outside the steady window marked ``warmup`` (so that
    :func:`.aggregate` leaves them out). The window is a span of the planned send
    order (``planned_pos``: 0 the first request, 1 the last), so every arm and round
    is measured on the same requests."""
    a, b = steady
    return [{**r, "warmup": not a <= float(r.get("planned_pos") or 0.0) <= b}
            for r in records]


def replay_metrics(records: Sequence[dict[str, Any]], *, steady: tuple[float, float],
                   tolerance: float, slo: dict[str, float | None] | None
                   ) -> tuple[dict[str, float], dict[str, Any]]:
    """(metrics, detail) of one replay: the load metrics over the steady window, TTFT
    by turn (first turns against later ones), designed and measured cache hit rates
    and misses per output token; a hit-rate gap beyond ``tolerance`` is in
    ``detail['cache_warning']``."""
    marked = steady_window(records, steady)
    metrics, detail = aggregate(marked, slo)
    inside = [r for r in marked if not r["warmup"] and r.get("status") == "ok"]
    detail["steady"] = {"share": list(steady), "requests": sum(not r["warmup"] for r in marked),
                        "left_out": sum(bool(r["warmup"]) for r in marked)}
    for name, turns in (("first", [r for r in inside if r.get("turn") == 1]),
                        ("later", [r for r in inside if (r.get("turn") or 1) > 1])):
        ttft = [r["ttft_ms"] for r in turns if r.get("ttft_ms") is not None]
        if ttft:
            for q in PERCENTILES:
                metrics[f"trace_ttft_{name}_p{q}_ms"] = percentile(ttft, q)
    prompt = sum(int(r.get("input_length") or 0) for r in inside)
    designed = sum(int(r.get("designed_cached") or 0) for r in inside)
    if prompt:
        metrics["trace_designed_hit_rate"] = designed / prompt
    known = [r for r in inside if r.get("cached_tokens") is not None]
    out_tokens = sum(int(r.get("completion_tokens") or 0) for r in known)
    if known and len(known) == len(inside):
        cached = sum(int(r["cached_tokens"]) for r in known)
        metrics["trace_hit_rate"] = cached / prompt if prompt else 0.0
        if out_tokens:
            metrics["trace_misses_per_token"] = (prompt - cached) / out_tokens
        gap = metrics["trace_hit_rate"] - metrics.get("trace_designed_hit_rate", 0.0)
        if abs(gap) > tolerance:
            detail["cache_warning"] = (
                f"measured cache hit rate {metrics['trace_hit_rate']:.1%} against "
                f"{metrics.get('trace_designed_hit_rate', 0.0):.1%} designed (tolerance "
                f"{tolerance:.0%})")
    elif inside:
        detail["cache_unmeasured"] = (f"{len(inside) - len(known)} of {len(inside)} responses "
                                      "carried no cached-token count")
    return metrics, detail


#: a measured replay, stored as a load level is: each request, then the sample
ReplayOutcome = LevelOutcome


def measure_replay(client: Client, prompts: PromptMaker, workload: Workload, plan: Plan, *,
                   seed: int, time_left: float,
                   stop_event: threading.Event | None = None) -> ReplayOutcome:
    """Replay ``plan`` once against the client's server and aggregate it."""
    spec = workload.replay
    assert spec is not None
    speed = spec.speed if isinstance(spec, TraceSpec) else 1.0
    run = run_replay(client, prompts, plan, seed=seed, speed=speed,
                     concurrency=spec.concurrency, time_left=min(time_left, spec.timeout),
                     workers=spec.workers, stop_event=stop_event)
    reqs = replay_records(run, plan)
    slo = workload.slo.model_dump() if workload.slo else None
    metrics, detail = replay_metrics(reqs, steady=spec.steady, tolerance=spec.tolerance, slo=slo)
    # cpu_s: the busiest client process's CPU seconds (one event loop each)
    detail.update(level=workload.kind, wall_s=run.wall_s, client_cpu_s=run.cpu_s,
                  client_workers=spec.workers,
                  client_cpu_share=run.cpu_s / run.wall_s if run.wall_s > 0 else None,
                  cache=spec.cache, warm_prompts=len(plan.warm))
    detail["completion_tokens"] = sum(int(r.get("completion_tokens") or 0) for r in reqs)
    bad = [r for r in reqs if r["status"] != "ok"]
    reasons = []
    if run.warm_failed:
        reasons.append(f"{len(run.warm_failed)} warm-up prompt(s) failed: {run.warm_failed[0]}")
    if run.cut:
        reasons.append(f"{run.cut}: {len(reqs) - len(bad)} of {len(reqs)} requests finished")
    elif bad:
        reasons.append(f"{len(bad)} of {len(reqs)} requests failed: {bad[0]['reason']}")
    valid = not reasons and "load_output_tok_s" in metrics
    if not valid and not reasons:
        reasons.append("no request in the steady window succeeded")
    return ReplayOutcome(reqs, metrics, detail, valid, "; ".join(reasons) or None)
