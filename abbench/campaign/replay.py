"""A ``trace:`` / ``sessions:`` workload in one server life: the cache put in its
designed state, the traffic replayed (each rep), its requests and sample stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from abbench.campaign.progress import Progress
from abbench.collectors.counters import flush_once
from abbench.config.presets import arm_preset
from abbench.config.schema import Config
from abbench.config.traffic import SessionsSpec
from abbench.config.workloads import Workload
from abbench.errors import AbbenchError, Interrupted
from abbench.model.records import FlushRecord, LoadRequest, LoadSample, Record, at
from abbench.slot import SlotContext
from abbench.workload.decode import PromptMaker
from abbench.workload.sessions import Plan, make_plan, measure_replay, workload_trace


class Plans:
    """Each replayed workload's plan, read once per run (the same for every slot)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._plans: dict[tuple[int, int], Plan] = {}

    def seed(self, workload: Workload, run_seed: int) -> int:
        spec = workload.replay
        assert spec is not None
        return spec.seed if spec.seed is not None else run_seed

    def checked(self) -> Plans:
        """Read every trace file now (a ConfigError names the file and line)."""
        for i, w in enumerate(self.cfg.workloads):
            if w.trace is not None:
                self.get(i, 0)
        return self

    def get(self, w_index: int, run_seed: int) -> Plan:
        spec = self.cfg.workloads[w_index].replay
        if spec is not None and spec.seed is None and isinstance(spec, SessionsSpec):
            key = (w_index, run_seed)  # generated: the run's seed shapes the sessions
        else:
            key = (w_index, 0)
        if key not in self._plans:
            w = self.cfg.workloads[w_index]
            assert w.replay is not None
            base = Path(self.cfg.source).parent if self.cfg.source else Path.cwd()
            trace = workload_trace(w, base, self.seed(w, run_seed))
            self._plans[key] = make_plan(trace, w.replay.cache)
        return self._plans[key]


def cold_flush(ctx: SlotContext, row: str, rep: int) -> str | None:
    """Empty the prefix cache before a cold replay; why it could not be, or None.
    llama.cpp has no flush endpoint: its server life starts empty, so only the first
    rep of a life is cold there (later reps say so). The first rep of a window the flush
    collector opened with a flush needs none of its own."""
    if rep == 0 and row in ctx.flushed:
        return None
    preset = arm_preset(ctx.arm)
    path = preset.flush_path
    if not path:
        return None if rep == 0 else (f"preset {preset.name} has no cache flush: rep "
                                      f"{rep + 1} ran on the cache rep 1 left")
    out = flush_once(lambda: ctx.client.call("POST", path, timeout=60), preset)
    ctx.record(FlushRecord.model_validate({**at(ctx.slot), "type": "flush", "workload": row,
                                           "path": path, **out}))
    return None if out.get("ok") else f"the cache flush failed: {out.get('reason')}"


def replay_rep(ctx: SlotContext, plans: Plans, prompts: PromptMaker, workload: Workload,
               w_index: int, rep: int, append_many: Callable[[list[Record]], None],
               stop_event: threading.Event, progress: Progress) -> LoadSample:
    """One replay of ``workload`` (one rep); its requests appended, its sample returned
    (:class:`Interrupted` when the run was stopped meanwhile)."""
    spec = workload.replay
    assert spec is not None
    row = workload.title
    progress.slot(ctx.slot.index, ctx.arm.name, ctx.slot.round,
                  f"{row} rep {rep + 1}/{ctx.cfg.reps}")
    common = {**at(ctx.slot), "workload": row, "rep": rep, "level": workload.kind}
    key = workload.row_keys()[0]
    head = {**common, "type": "sample", "t": time.time(), "context": key.context,
            "decode_tokens": key.decode_tokens}
    try:
        plan = plans.get(w_index, ctx.run_seed)
        flush_why = cold_flush(ctx, row, rep) if spec.cache == "cold" else None
        out = measure_replay(ctx.client, prompts, workload, plan,
                             seed=plans.seed(workload, ctx.run_seed), time_left=spec.timeout,
                             stop_event=stop_event)
    except AbbenchError as e:
        out = None
        failed = LoadSample.model_validate({**head, "valid": False, "status": "failed",
                                            "reason": e.message, "metrics": {}})
    if stop_event.is_set():
        raise Interrupted("interrupted")
    if out is None:
        return failed
    append_many([LoadRequest.model_validate({**common, "type": "load_request", **r})
                 for r in out.requests])
    reason = "; ".join(x for x in (out.reason, flush_why) if x) or None
    status = "ok" if out.valid and not flush_why else "invalid"
    if not out.metrics.get("load_output_tok_s"):
        status = "failed"
    return LoadSample.model_validate({**head, "valid": status == "ok", "reason": reason,
                                      "metrics": out.metrics, "status": status,
                                      **out.detail})
