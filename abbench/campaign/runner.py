"""The campaign: for each slot of the schedule, start the arm's server fresh, run
the workloads, record every sample the moment it is measured, stop the server.

A failed start or a server that dies marks that (arm, round) failed and the run
goes on. SIGINT/SIGTERM stop the server in hand, keep every sample, and mark the
run interrupted (exit 130) with the command that resumes it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import shutil
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from abbench.campaign.describe import arm_meta, request_templates, server_props
from abbench.campaign.environment import environment
from abbench.campaign.health import DEATH_GRACE_S, SlotFailed, check_after
from abbench.campaign.preflight import check_config
from abbench.campaign.progress import Progress, SilentProgress
from abbench.campaign.replay import Plans, replay_rep
from abbench.campaign.until_ci import planned_and_more
from abbench.collectors.tasks import workload_window
from abbench.config.arms import ResolvedArm, placeholder_values, resolve_arms
from abbench.config.foresight import model_files
from abbench.config.loader import prompt_text
from abbench.config.schedule_plan import plan
from abbench.config.schema import Config
from abbench.config.storage import config_for_storage
from abbench.config.workloads import Workload
from abbench.errors import (
    AbbenchError,
    ConfigError,
    InternalError,
    Interrupted,
    RequestError,
    ServerError,
    StoreError,
    clip,
)
from abbench.model.records import (
    At,
    DecodeSample,
    LoadRequest,
    LoadSample,
    Record,
    SlotRecord,
    SystemFingerprintRecord,
    at,
)
from abbench.model.rounds import complete_rounds, read_state
from abbench.model.runmeta import PromptDigest, RunMeta
from abbench.model.schedule import Slot
from abbench.report.compare import write_run_report
from abbench.report.markdown import Report, note_text
from abbench.report.notes import exposure_note
from abbench.report.setup import life_line
from abbench.server.interrupts import handle_signals, shielded
from abbench.server.life import startup_sample, system_fingerprints
from abbench.server.process import Server, start_ready
from abbench.slot import SlotContext, SlotTask
from abbench.store.run import Run
from abbench.version import __version__
from abbench.workload.capacity_search import run_capacity
from abbench.workload.decode import Client, PromptMaker, run_decode
from abbench.workload.load import level_arrivals, measure_level


@dataclass(frozen=True)
class Resumption:
    """An open run and the slots it has left, handed to :meth:`Campaign.execute`."""

    run: Run
    slots: list[Slot]


@dataclass
class RunOptions:
    results: Path
    rounds: int | None = None
    seed: int | None = None
    config_path: str | None = None
    #: more run.json fields (a shard's ``id``, ``shard``, ``host_fingerprint``)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Timing:
    wall_start: float = field(default_factory=time.perf_counter)
    server_s: float = 0.0  # start-up until ready, and stop
    requests_s: float = 0.0  # warm-up and measured requests, tokenize included
    tasks_s: float = 0.0  # quality checks, fingerprints
    ready_lags_ms: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall_start
        accounted = self.server_s + self.requests_s + self.tasks_s
        return {"wall_s": wall, "server_s": self.server_s, "requests_s": self.requests_s,
                "tasks_s": self.tasks_s, "overhead_s": max(0.0, wall - accounted),
                "ready_lag_ms_max": max(self.ready_lags_ms) if self.ready_lags_ms else None}

    @contextlib.contextmanager
    def count(self, what: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, what, getattr(self, what) + time.perf_counter() - t0)


@dataclass
class RunOutcome:
    run: Run
    report: Report
    status: str
    failed_slots: int

    @property
    def report_md(self) -> str:
        return self.report.text


def config_digest(cfg: Config) -> str:
    data = json.dumps(config_for_storage(cfg), sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


class Campaign:
    def __init__(self, cfg: Config, opts: RunOptions, *, progress: Progress | None = None,
                 tasks: list[SlotTask] | None = None):
        self.cfg = cfg
        self.opts = opts
        self.progress = progress or SilentProgress()
        checked = check_config(cfg, strict_exec=True)  # exit 2 before anything starts
        self.tasks = tasks if tasks is not None else checked.tasks
        self.warnings = checked.warnings
        self.arms = {a.name: a for a in resolve_arms(cfg)}
        for arm in self.arms.values():
            if arm.git is not None and arm.built is None:
                raise InternalError(f"arm {arm.name} is a git arm that was not built "
                                    "(abbench run builds git arms before it runs them)")
        # each workload's prompt file, read once per run: an edit while it runs changes
        # nothing measured (run.json keeps each text's digest; a resume checks it)
        self.prompts = [prompt_text(cfg, i) for i in range(len(cfg.workloads))]
        self.stop_event = threading.Event()
        self.timing = Timing()
        self.first_ttft: dict[int, float | None] = {}  # slot -> its first request's TTFT
        self.run: Run | None = None
        self.failed = 0
        #: the warm-up requests of the current server life that failed
        self.warmup_failed: list[str] = []
        self._plans = Plans(cfg).checked()  # a bad trace file: exit 2 before any server

    # ----------------------------------------------------------- set-up
    def create_run(self, schedule: list[Slot], seed: int) -> Run:
        rounds = self.opts.rounds or self.cfg.rounds
        meta = {
            "created": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "status": "running",
            "abbench": __version__,
            "config_path": str(Path(self.opts.config_path).resolve()) if self.opts.config_path
            else None,
            "config_digest": config_digest(self.cfg),
            "arms": [arm_meta(a) for a in self.arms.values()],
            "baseline": self.cfg.baseline_name,
            "rounds": rounds,
            "reps": self.cfg.reps,
            "table": self.cfg.table.model_dump(mode="json"),
            "order": self.cfg.order,
            "seed": seed,
            "schedule": [[s.round, s.position, s.arm] for s in schedule],
            "environment": environment(),
            "models": model_files(self.cfg),
            "servers": {},
            "prompts": {k: d.data() for k, d in self.prompt_digests().items()},
            "warnings": self.warnings,
            "pid": os.getpid(),
            **self.opts.meta,
        }
        run = Run.create(self.opts.results, meta, config_for_storage(self.cfg))
        self.copy_build_logs(run)
        return run

    def prompt_digests(self) -> dict[str, PromptDigest]:
        """Workload title -> the sha256 and length of the prompt text it read (file
        prompts only)."""
        return {w.title: PromptDigest(sha256=hashlib.sha256(text.encode()).hexdigest(),
                                      chars=len(text))
                for w, text in zip(self.cfg.workloads, self.prompts, strict=True)
                if text is not None}

    def copy_build_logs(self, run: Run) -> None:
        """Each git arm's build log, as ``logs/build-<arm>.log`` in the run folder."""
        for arm in self.arms.values():
            if arm.built and arm.built.get("log"):
                try:
                    dest = run.checked(run.path / "logs" / f"build-{arm.name}.log")
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(arm.built["log"], dest)
                except (OSError, StoreError) as e:
                    self.progress.log(f"warning: build log of {arm.name} not copied: {e}")

    # ----------------------------------------------------------- running
    def execute(self, resume: Resumption | None = None) -> RunOutcome:
        """Run the schedule (or, resuming, the slots ``resume`` says are left).

        However it ends, the run is not left ``running``: complete, interrupted (exit
        130), or failed (a run-time error: exit 1), each with the report of what was
        measured and, unless complete, the command that resumes it."""
        if resume is None:
            schedule, seed = plan(self.cfg, rounds=self.opts.rounds, seed=self.opts.seed)
            self.run = run = self.create_run(schedule, seed)
        else:
            self.run = run = resume.run
            schedule = resume.slots
        run.take_writer()
        try:
            return self._execute(run, schedule)
        finally:
            run.release_writer()

    def _execute(self, run: Run, schedule: list[Slot]) -> RunOutcome:
        resume_hint = f"resume with: abbench run --resume {run.id} --results {self.opts.results}"
        try:
            status, why = self._run_schedule(run, schedule)
        except BaseException as e:  # disk full, a bug, ...: keep what is written, say how
            self._stopped(run, e, resume_hint)
        try:  # a signal now waits until run.json and the report are written
            with handle_signals(self.stop_event), shielded(raise_pending=True):
                meta = run.update_meta(status=status, finished=_now(), rounds_done=_rounds_done(
                    run), timing=self.timing.as_dict())
                report = self._report(meta)
        except Interrupted as e:
            raise Interrupted(f"{e.message} after the run ended; run.json and the report are "
                              f"written ({run.path / 'report.md'})") from None
        if status == "interrupted":
            raise Interrupted(f"{why}; every sample measured so far is kept in "
                              f"{run.samples_path}", hint=resume_hint)
        return RunOutcome(run=run, report=report, status=status, failed_slots=self.failed)

    def _run_schedule(self, run: Run, schedule: list[Slot]) -> tuple[str, str]:
        """Every slot in order: ("complete", "") or ("interrupted", why)."""
        self.progress.log(f"run {run.id}: {len(schedule)} server lives, results in {run.path}")
        for w in self.warnings:
            self.progress.log(f"warning: {w}")
        with handle_signals(self.stop_event):
            try:
                self.progress.start(schedule[-1].index + 1 if schedule else 0)
                for slot in self.slots(schedule, _seed(run.info())):
                    self.run_slot(slot)
                self.progress.finish()
            except Interrupted as e:
                self.progress.finish()
                seq = run.info().until_ci
                decided = self.cfg.stats.until_ci is None or (seq is not None and seq.stopped)
                if decided and not read_state(run.records(), run.info()).unfinished():
                    # every server life had ended and --until-ci (if on) had stopped
                    self.progress.log("interrupted after the last server stopped: the run "
                                      "is complete")
                    return "complete", ""
                return "interrupted", e.message
        return "complete", ""

    def _stopped(self, run: Run, e: BaseException, resume_hint: str) -> NoReturn:
        """The run stopped on ``e``: mark it failed (interrupted for a stray
        KeyboardInterrupt), write the report from what was measured, raise exit 1."""
        with contextlib.suppress(Exception):
            self.progress.finish()
        if isinstance(e, KeyboardInterrupt):
            e = Interrupted("stopped by SIGINT")
        status = "interrupted" if isinstance(e, Interrupted) else "failed"
        if isinstance(e, AbbenchError):
            what, hint = e.message, e.hint or "fix the cause"
        else:  # a bug: keep the traceback for the report of it
            what = f"internal error: {_what(e)}"
            hint = f"please report it with {run.path / 'error.log'}"
            with contextlib.suppress(Exception):
                run.write_text("error.log", "".join(traceback.format_exception(e)))
        with contextlib.suppress(Exception):
            run.update_meta(status=status, error=what, finished=_now(),
                            timing=self.timing.as_dict(), rounds_done=_rounds_done(run))
        with contextlib.suppress(Exception):
            self.write_report(run.info())
        if isinstance(e, Interrupted):
            raise Interrupted(f"{e.message}; every sample measured so far is kept in "
                              f"{run.samples_path}", hint=resume_hint) from None
        if not isinstance(e, Exception):  # SystemExit, GeneratorExit: not ours to turn
            raise e
        raise AbbenchError(f"the run stopped: {what}; every sample written before is kept "
                           f"in {run.samples_path}", where=getattr(e, "where", None),
                           hint=f"{hint}; then {resume_hint}") from None

    def slots(self, schedule: list[Slot], seed: int) -> Iterator[Slot]:
        """The planned slots, then the balanced blocks ``--until-ci`` adds."""
        assert self.run is not None
        yield from planned_and_more(self.cfg, self.run, schedule, seed, self.progress)

    def _report(self, meta: RunMeta) -> Report:
        assert self.run is not None
        try:
            return self.write_report(meta)
        except Exception as e:
            raise AbbenchError(f"every sample is kept in {self.run.samples_path}, but the "
                               f"report could not be written: {_what(e)}",
                               hint=f"abbench report {self.run.id} --results "
                                    f"{self.opts.results} renders it again") from None

    def write_report(self, meta: RunMeta) -> Report:
        assert self.run is not None
        return write_run_report(self.run, self.run.records(), meta)[1]

    def record(self, rec: Record) -> None:
        assert self.run is not None
        self.run.append(rec)  # shielded from interrupts: never half a line

    def run_slot(self, slot: Slot) -> None:
        assert self.run is not None
        arm = self.arms[slot.arm]
        base = at(slot)
        if self.stop_event.is_set():  # a signal came while a server was being stopped
            raise Interrupted("interrupted")
        self.progress.slot(slot.index, slot.arm, slot.round, "starting server")
        t_start = time.time()
        self.warmup_failed = []
        server: Server | None = None
        lives: list[Server] = []  # a start whose auto port was taken is tried again
        status: str = "failed"
        reason: str | None = "the server life did not finish"
        try:
            with self.timing.count("server_s"):
                ready_s = start_ready(
                    arm, round_=slot.round, log_path=self.run.log_path(arm.name, slot.round),
                    argv_for_port=lambda port: arm.command(
                        placeholder_values(self.cfg, arm, port=port, round_=slot.round)),
                    should_stop=self.stop_event.is_set, say=self.progress.log, lives=lives)
                server = lives[-1]
            if server.ready_noticed_lag is not None:
                self.timing.ready_lags_ms.append(server.ready_noticed_lag * 1e3)
            self.progress.log(f"  {arm.name} round {slot.round}: ready in {ready_s:.1f} s "
                              f"(port {server.port})")
            if server.exposed:
                self._exposed(arm.name, server.exposed)
            self.serve(slot, arm, server, base)
            status, reason = "ok", None
            figures = life_line(self.run.records(), arm.name, slot.round)
            if figures:  # a long campaign shows its numbers as they come
                self.progress.log(f"  {arm.name} round {slot.round}: {figures}")
        except (ServerError, ConfigError) as e:  # ConfigError: the program vanished mid-run
            status, reason = "failed", e.message
            self.progress.log(f"  FAILED arm {arm.name}, round {slot.round}: {e}")
        except SlotFailed as e:
            status, reason = "failed", str(e)
            self.progress.log(f"  FAILED arm {arm.name}, round {slot.round}: {e}")
        except Interrupted:
            status, reason = "interrupted", "abbench was interrupted"
            raise
        except StoreError as e:  # the results disk: the run stops (execute says how)
            status, reason = "failed", e.message
            raise
        except Exception as e:  # anything unforeseen fails this server life, never ok
            log = self.run.log_path(arm.name, slot.round)
            status, reason = "failed", f"internal error: {_what(e)} (traceback in {log.name})"
            with contextlib.suppress(OSError), open(log, "a", encoding="utf-8") as f:
                f.write("# abbench: " + "".join(traceback.format_exception(e)))
            self.progress.log(f"  FAILED arm {arm.name}, round {slot.round}: {reason}")
        finally:
            code = None
            server = lives[-1] if lives else None
            if server is not None:
                with self.timing.count("server_s"):
                    code = server.stop()  # shielded: an interrupt waits for the stop
            if status != "ok":
                self.failed += status == "failed"
            more: dict[str, object] = {"pid": server.pid} if server is not None else {}
            if server is not None and server.ready_at is not None:
                more["ready_s"] = server.ready_at - server.started_at
            if status == "failed" and server is not None:
                more["log_tail"] = server.log_tail(10)
            if self.warmup_failed:
                more["warmup_failed"] = list(self.warmup_failed)
            up = startup_sample(base, more.get("ready_s"), self.first_ttft.pop(slot.index, None))
            with contextlib.suppress(StoreError):
                self.run.append_many([*([up] if up else []), SlotRecord(
                    **base, status=status, reason=reason, t_start=t_start, t_end=time.time(),
                    exit_code=code, log=str(self.run.log_path(arm.name, slot.round)
                                            .relative_to(self.run.path)), **more)])

    def _exposed(self, arm: str, addresses: list[str]) -> None:
        """A server listening beyond 127.0.0.1: a warning now, in run.json and the report."""
        assert self.run is not None
        self.run.add_exposed(arm, addresses)
        self.progress.log(f"  {note_text(exposure_note(arm, addresses))}")

    def serve(self, slot: Slot, arm: ResolvedArm, server: Server, base: At) -> None:
        """Everything done with one ready server."""
        assert self.run is not None
        client = Client(server.base_url, arm)
        info = self.run.info()  # run.json read once per life
        ctx = SlotContext(self.cfg, arm, slot, server, client, self.run.path,
                          info.order_seed, self.record, self.run.records, self.stop_event)
        try:
            props = None
            if arm.name not in info.servers:  # what the server says about itself, once
                with self.timing.count("requests_s"):
                    props = server_props(client, arm)
            templates = None
            if arm.name not in info.request_templates:  # what each request sends
                templates = request_templates(self.cfg, client)
            if props is not None or templates is not None:  # one write of run.json
                self.run.describe_arm(arm.name, props=props, templates=templates)
            for task in self.tasks:
                if task.cold:
                    self._task(task, ctx)
            seed = (info.seed or 0) * 100003 + slot.index
            for w_index, workload in enumerate(self.cfg.workloads):
                prompts = PromptMaker(client, seed=seed * 31 + w_index,
                                      source_text=self.prompts[w_index])
                if w_index == 0:
                    self._warmup(slot, arm, server, client, prompts)
                if workload.load is not None:
                    self._load(ctx, prompts, workload, w_index, base)
                if workload.replay is not None:
                    self._replay(ctx, prompts, workload, w_index)
                if workload.capacity is not None:
                    self._capacity(ctx, prompts, workload, w_index, base)
                for context in workload.contexts:
                    row = workload.row_name(context)
                    with workload_window(self.tasks, ctx, row):  # collectors' windows
                        for rep in range(self.cfg.reps):
                            self.progress.slot(slot.index, arm.name, slot.round,
                                               f"{row} rep {rep + 1}/{self.cfg.reps}")
                            self._one_decode(slot, arm, server, client, prompts, workload,
                                             context, row, rep, base)
            for task in self.tasks:
                if not task.cold:
                    self._task(task, ctx)
            fps = system_fingerprints(self.run.records(), slot.index)
            if fps:  # vLLM's system_fingerprint, per server life
                self.record(SystemFingerprintRecord(**base, fingerprints=fps))
        finally:
            client.close()

    def _task(self, task: SlotTask, ctx: SlotContext) -> None:
        with self.timing.count("tasks_s"):
            task.run(ctx)
        if not ctx.server.alive():
            raise SlotFailed(f"the server exited during {task.name} "
                              f"(code {ctx.server.proc.returncode})")

    def _warmup(self, slot: Slot, arm: ResolvedArm, server: Server, client: Client,
                prompts: PromptMaker) -> None:
        first: float | None = None  # the first request's TTFT (a start-up row)
        for i in range(self.cfg.warmup):
            self.progress.slot(slot.index, arm.name, slot.round, "warm-up")
            with self.timing.count("requests_s"):
                try:
                    ids, _nonce = prompts.prompt(64)
                    r = client.complete(ids, 8, stop_event=self.stop_event)
                    first = r.ttft if i == 0 else first
                except RequestError as e:
                    if not server.alive(DEATH_GRACE_S):
                        raise SlotFailed(f"the server died during warm-up: {e.message}") \
                            from None
                    # kept with the life (slot record, log): its requests ran less warm
                    self.warmup_failed.append(f"warm-up {i + 1}: {e.message}")
                    self.progress.log(f"  warning: {arm.name} round {slot.round}: warm-up "
                                      f"request {i + 1} failed: {e.message}")
        self.first_ttft[slot.index] = first  # stored with the slot record (one fsync)

    def _one_decode(self, slot: Slot, arm: ResolvedArm, server: Server, client: Client,
                    prompts: PromptMaker, workload: Workload, context: int, row: str, rep: int,
                    base: At) -> None:
        t0 = time.time()
        with self.timing.count("requests_s"):
            try:
                out = run_decode(client, prompts, workload, context, self.stop_event)
                outcome = {"valid": out.valid, "status": "ok" if out.valid else "invalid",
                           "reason": out.reason, "metrics": out.metrics, **out.detail}
            except RequestError as e:
                outcome = {"valid": False, "status": "failed", "reason": e.message,
                           "metrics": {}}
        rec = DecodeSample(**base, rep=rep, workload=row, context=context,
                           decode_tokens=workload.decode_tokens, t=t0, **outcome)
        if self.stop_event.is_set():
            raise Interrupted("interrupted")
        self.record(rec)
        check_after(rec, server, arm)

    def _load(self, ctx: SlotContext, prompts: PromptMaker, workload: Workload, w_index: int,
              base: At) -> None:
        """A load workload: each level (and rep) measured, its requests stored, then its
        sample; all levels within the workload's timeout."""
        assert self.run is not None and workload.load is not None
        spec, slot = workload.load, ctx.slot
        deadline = time.perf_counter() + spec.timeout
        for level in spec.levels():
            row = workload.load_row(level)
            with workload_window(self.tasks, ctx, row):
                for rep in range(self.cfg.reps):
                    self.progress.slot(slot.index, ctx.arm.name, slot.round,
                                       f"{row} rep {rep + 1}/{self.cfg.reps}")
                    common = {**base, "workload": row, "rep": rep, "level": level.label,
                              "concurrency": level.concurrency, "rate": level.rate}
                    head = {**common, "type": "sample", "t": time.time(),
                            "context": spec.prompt_tokens, "decode_tokens": spec.output_tokens}
                    with self.timing.count("requests_s"):
                        try:
                            out = measure_level(
                                ctx.client, prompts, workload, level,
                                times=level_arrivals(spec, level, ctx.run_seed, slot.round,
                                                     w_index, rep),
                                time_left=deadline - time.perf_counter(),
                                stop_event=self.stop_event)
                        except RequestError as e:  # the prompts could not be made
                            out = None
                            rec = LoadSample.model_validate({
                                **head, "valid": False, "status": "failed",
                                "reason": e.message, "metrics": {}})
                    if self.stop_event.is_set():
                        raise Interrupted("interrupted")
                    if out is not None:
                        self.run.append_many([LoadRequest.model_validate(
                            {**common, "type": "load_request", **r}) for r in out.requests])
                        status = "ok" if out.valid else "invalid"
                        if not out.metrics.get("load_output_tok_s"):
                            status = "failed"
                        rec = LoadSample.model_validate({
                            **head, "valid": out.valid, "reason": out.reason,
                            "metrics": out.metrics, "status": status, **out.detail})
                    self.record(rec)
                    check_after(rec, ctx.server, ctx.arm)

    def _replay(self, ctx: SlotContext, prompts: PromptMaker, workload: Workload,
                w_index: int) -> None:
        """A trace or sessions workload: each rep replays the same traffic."""
        assert self.run is not None
        with workload_window(self.tasks, ctx, workload.title):
            for rep in range(self.cfg.reps):
                with self.timing.count("requests_s"):
                    rec = replay_rep(ctx, self._plans, prompts, workload, w_index, rep,
                                     self.run.append_many, self.stop_event, self.progress)
                self.record(rec)
                check_after(rec, ctx.server, ctx.arm)

    def _capacity(self, ctx: SlotContext, prompts: PromptMaker, workload: Workload,
                  w_index: int, base: At) -> None:
        """A capacity workload: the search's levels stored as they end, then its answer."""
        assert self.run is not None
        self.progress.slot(ctx.slot.index, ctx.arm.name, ctx.slot.round, workload.title)
        with workload_window(self.tasks, ctx, workload.title), self.timing.count("requests_s"):
            rec = run_capacity(ctx.client, prompts, workload, base=base, run_seed=ctx.run_seed,
                               w_index=w_index, record=self.record,
                               record_many=self.run.append_many, stop_event=self.stop_event)
        self.record(rec)
        check_after(rec, ctx.server, ctx.arm)



def _what(e: BaseException) -> str:
    """An unexpected exception in one line."""
    return f"{type(e).__name__}: {clip(e)}" if str(e) else type(e).__name__


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _rounds_done(run: Run) -> int:
    """Rounds in which every arm finished (the rounds the comparison uses)."""
    return len(complete_rounds(run.records(), run.info()))


def _seed(meta: RunMeta) -> int:
    """The run's seed (create_run and resume always store one)."""
    if meta.seed is None:
        raise InternalError(f"run {meta.id}'s run.json has no seed", where="run.json")
    return meta.seed


