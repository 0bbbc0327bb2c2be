"""``abbench gather CAMPAIGN_DIR``: the shards' run folders merged into one run.

The campaign folder is itself a run folder: after a gather its ``samples.jsonl`` holds
every shard's records, each with ``host`` (the shard folder's name, ``<i>-<host>``:
the block its rounds belong to), ``shard`` (the index), ``shard_round`` and
``shard_slot`` (the numbers inside the shard folder), and campaign-wide ``round`` and
``slot`` numbers; paths (server logs, quality output) point into ``shards/``. Its
``run.json`` lists the hosts, their fingerprints and rounds per host. So ``report``,
``compare``, ``history``, ``ls`` and ``load_samples`` read it like any run, and the
table's statistics see the hosts (:mod:`abbench.stats.blocks`).

Round numbers: shard ``i``'s planned rounds keep their campaign numbers
(``first_round ..``); rounds a shard ran beyond them (a failed round run again, the
rounds left run on another host) get numbers after the planned ones. A shard that
ended short of its rounds (its task failed, was cancelled or preempted, or never
started) has its missing (arm, round) pairs recorded as failed slots, so the report
says which and why; the rounds it finished, and every other shard's, are kept.

Hosts whose GPUs, driver or CUDA (the CPU model, without GPUs) differ are refused:
their ratios need not estimate one thing (docs/many-hosts.md), unless the
campaign or the gather allows mixed hosts.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abbench.campaign.runner import config_digest
from abbench.errors import ConfigError, StoreError
from abbench.model.records import QualityCommand, QualitySample, Record, SlotRecord
from abbench.model.rounds import read_state
from abbench.model.runmeta import Environment, HostFingerprint, HostMeta, RunMeta
from abbench.model.shardplan import ShardPlan, shard_schedule
from abbench.report.compare import write_run_report
from abbench.report.markdown import Report
from abbench.report.table import Table
from abbench.store.run import RUN_FILE, SAMPLES_FILE, SCHEMA_VERSION, Run, atomic_write, record_line

CAMPAIGN_FILE = "campaign.json"
SHARDS_DIR = "shards"
#: task states that mean a shard may still be running
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING",
          "SUSPENDED", "STAGE_OUT", "SIGNALING", "REQUEUE_HOLD", "REQUEUE_FED")
#: the fields of a fingerprint that must agree across hosts (without GPUs: the CPU)
MUST_AGREE = ("gpus", "driver", "cuda")


# --------------------------------------------------------------------- the campaign file


def load_campaign(folder: Path) -> dict[str, Any]:
    path = folder / CAMPAIGN_FILE
    try:
        camp = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("not a campaign folder (no campaign.json)", where=str(folder),
                          hint="give the folder `abbench run ARMS --shards N` made") from None
    except (OSError, ValueError) as e:
        raise StoreError(f"campaign.json cannot be read: {e}", where=str(path)) from None
    if camp.get("schema") != SCHEMA_VERSION:
        raise StoreError(f"campaign.json has schema {camp.get('schema')!r}, this abbench "
                         f"reads {SCHEMA_VERSION}", where=str(path), hint="upgrade abbench")
    return dict(camp)


def save_campaign(folder: Path, camp: dict[str, Any]) -> None:
    atomic_write(folder / CAMPAIGN_FILE, json.dumps(camp, indent=2) + "\n")


def shard_plans(camp: dict[str, Any]) -> list[ShardPlan]:
    return [ShardPlan(int(s["index"]), int(s["first_round"]), int(s["rounds"]), int(s["seed"]))
            for s in camp["shards"]]


def check_digest(camp: dict[str, Any], cfg: Any, where: str) -> None:
    """The arms file must resolve as it did when the campaign was planned."""
    digest = config_digest(cfg)
    if digest != camp.get("config_digest"):
        raise ConfigError(
            f"the arms file resolves differently here (config digest {digest}, the campaign "
            f"has {camp.get('config_digest')})", where=where,
            hint="every host must see the same arms file, programs and environment "
                 "variables it names (shared storage); restore it or plan a new campaign")


# --------------------------------------------------------------------- shard folders


@dataclass
class ShardRun:
    """One shard folder: its run, records and what they say."""

    index: int
    run: Run
    meta: RunMeta
    records: list[Record]

    @property
    def name(self) -> str:
        return self.run.path.name

    def complete_rounds(self) -> list[int]:
        return read_state(self.records, self.meta).complete()


def shard_runs(folder: Path, problems: list[str] | None = None) -> list[ShardRun]:
    """Every shard folder of the campaign, by shard index, then the order they began."""
    base = folder / SHARDS_DIR
    out: list[ShardRun] = []
    if not base.is_dir():
        return out
    for p in sorted(base.iterdir()):
        if not (p / RUN_FILE).is_file():
            continue
        run = Run(p)
        try:
            meta = run.info()
        except StoreError as e:
            if problems is not None:
                problems.append(str(e).replace("\n", "; "))
            continue
        if meta.shard is None:
            continue
        out.append(ShardRun(meta.shard.index, run, meta, run.records(problems)))
    out.sort(key=lambda s: (s.index, s.meta.created or "", s.name))
    return out


def rounds_done(plans: list[ShardPlan], runs: list[ShardRun]) -> dict[int, int]:
    """Shard index -> rounds finished by every arm, over all of its folders."""
    done = {p.index: 0 for p in plans}
    for s in runs:
        done[s.index] = done.get(s.index, 0) + len(s.complete_rounds())
    return done


# --------------------------------------------------------------------- mixed hosts


def _agree_key(fp: HostFingerprint) -> dict[str, Any]:
    gpus = sorted(str(g.name) for g in fp.gpus)
    key: dict[str, Any] = {"gpus": gpus, "driver": fp.driver, "cuda": fp.cuda}
    if not gpus:
        key["cpu"] = fp.cpu
    return key


def mixed_hosts(runs: Iterable[ShardRun]) -> list[str]:
    """What differs between the shards' hosts, one line per field ([] when they agree)."""
    keys = {s.name: _agree_key(s.meta.host_fingerprint or HostFingerprint()) for s in runs}
    out = []
    for fld in (*MUST_AGREE, "cpu"):
        seen: dict[str, list[str]] = {}
        for name, key in keys.items():
            if fld in key:
                seen.setdefault(json.dumps(key[fld]), []).append(name)
        if len(seen) > 1:
            out.append(f"{fld}: " + "; ".join(f"{json.loads(v) or 'none'} on "
                                              f"{', '.join(names)}" for v, names in seen.items()))
    return out


# --------------------------------------------------------------------- merging


def _rebase(rec: Record, prefix: str) -> Record:
    """Paths inside a shard folder (server log, quality output), from the campaign's."""
    def moved(paths: dict[str, object], keys: tuple[str, ...]) -> dict[str, object]:
        return {k: f"{prefix}/{v}" for k in keys for v in [paths.get(k)]
                if isinstance(v, str) and not v.startswith("/")}

    if isinstance(rec, SlotRecord):
        return rec.model_copy(update=moved({"log": rec.log}, ("log",)))
    if isinstance(rec, QualityCommand):
        return rec.model_copy(update=moved({"stdout": rec.stdout, "stderr": rec.stderr},
                                           ("stdout", "stderr")))
    if isinstance(rec, QualitySample):
        quality = {**rec.quality, **moved(rec.quality, ("stdout", "stderr"))}
        return rec.model_copy(update={"quality": quality})
    return rec


@dataclass
class Gathered:
    """What :func:`gather` wrote, and what is still missing."""

    run: Run
    table: Table
    report: Report
    #: shard index -> (rounds finished, rounds planned)
    progress: dict[int, tuple[int, int]]
    failed_slots: int
    mixed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def report_md(self) -> str:
        return self.report.text

    @property
    def complete(self) -> bool:
        return all(done >= planned for done, planned in self.progress.values())

    def missing(self) -> list[int]:
        return [i for i, (done, planned) in self.progress.items() if done < planned]


def _task_reason(camp: dict[str, Any], index: int) -> str:
    state = (camp.get("task_states") or {}).get(str(index))
    if not state:
        return f"shard {index} ended short of its rounds"
    return (f"shard {index}'s task ended {state.get('state')} (Slurm job "
            f"{state.get('job')}, task {state.get('task')})")


def merge(camp: dict[str, Any], runs: list[ShardRun], *, active: Iterable[int] = ()
          ) -> tuple[list[Record], list[list[Any]], dict[int, tuple[int, int]]]:
    """The campaign's records, its schedule, and rounds done per shard (see the module
    docstring for the numbering)."""
    plans = {p.index: p for p in shard_plans(camp)}
    total = sum(p.rounds for p in plans.values())
    arms = [a["name"] for a in camp["arms"]]
    taken: set[int] = set()
    next_round = total
    mapping: dict[tuple[str, int], int] = {}

    def number(s: ShardRun, local: int) -> int:
        nonlocal next_round
        key = (s.name, local)
        if key not in mapping:
            plan = plans.get(s.index)
            if plan is not None and local in plan.round_numbers and local not in taken:
                mapping[key] = local
            else:
                mapping[key] = next_round
                next_round += 1
            taken.add(mapping[key])
        return mapping[key]

    for s in runs:  # finished rounds first: they keep their planned numbers
        for r in s.complete_rounds():
            number(s, r)
    records: list[Record] = []
    schedule: list[list[Any]] = []
    slot_base = 0
    done = rounds_done(list(plans.values()), runs)
    short = {i for i, p in plans.items() if done.get(i, 0) < p.rounds and i not in active}
    for s in runs:
        prefix = f"{SHARDS_DIR}/{s.name}"
        sched = s.meta.schedule
        for r, p, a in sched:
            schedule.append([number(s, r), p, a])
        for rec in s.records:
            moves: dict[str, object] = {"host": s.name, "shard": s.index}
            if rec.round is not None:
                moves.update(shard_round=rec.round, round=number(s, rec.round))
            if rec.slot is not None:
                moves.update(shard_slot=rec.slot, slot=slot_base + rec.slot)
            records.append(_rebase(rec, prefix).model_copy(update=moves))
        n_slots = max([len(sched) - 1, *(r.slot for r in s.records if r.slot is not None)],
                      default=-1) + 1
        if s.index in short:  # what this folder left undone is failed, with the reason
            for slot in read_state(s.records, s.meta).unfinished():
                records.append(SlotRecord.model_validate({
                    "schema": SCHEMA_VERSION, "type": "slot", "status": "failed",
                    "reason": f"not run: {_task_reason(camp, s.index)}", "arm": slot.arm,
                    "round": number(s, slot.round), "position": slot.position,
                    "slot": slot_base + slot.index, "host": s.name, "shard": s.index,
                    "shard_round": slot.round, "shard_slot": slot.index}))
        slot_base += n_slots
    for i in sorted(short - {s.index for s in runs}):  # shards that never began
        plan = plans[i]
        for slot in shard_schedule(arms, plan, camp["order"], camp["seed"]):
            r = slot.round if slot.round not in taken else next_round + slot.round
            schedule.append([r, slot.position, slot.arm])
            records.append(SlotRecord.model_validate({
                "schema": SCHEMA_VERSION, "type": "slot", "status": "failed",
                "reason": f"not run: {_task_reason(camp, i)}; the shard never began",
                "arm": slot.arm, "round": r, "position": slot.position,
                "slot": slot_base + slot.index, "shard": i}))
        slot_base += len(arms) * plan.rounds
    return records, schedule, {i: (done.get(i, 0), p.rounds) for i, p in plans.items()}


def _merged_meta(camp: dict[str, Any], runs: list[ShardRun], schedule: list[list[Any]],
                 progress: dict[int, tuple[int, int]], records: list[Record],
                 active: Iterable[int], mixed: list[str]) -> dict[str, Any]:
    first = runs[0].meta if runs else None
    hosts = []
    for s in runs:
        fp = s.meta.host_fingerprint or HostFingerprint()
        env_s = s.meta.environment or Environment()
        hosts.append(HostMeta(name=s.name, shard=s.index, hostname=fp.hostname,
                              rounds=len(s.complete_rounds()), status=s.meta.status,
                              fingerprint=fp, machine=env_s.gpu_summary or fp.cpu))
    env = first.environment.data() if first is not None and first.environment else {}
    names = sorted({h.hostname for h in hosts if h.hostname})
    env["host"] = f"{len(hosts)} shard hosts: {', '.join(names)}" if hosts else "no host yet"
    servers: dict[str, Any] = {}
    timing: dict[str, Any] = {}
    for s in runs:
        for arm, props in s.meta.servers.items():
            servers.setdefault(arm, props)
        for k, v in (s.meta.timing.data() if s.meta.timing is not None else {}).items():
            if k == "ready_lag_ms_max":
                if v is not None:
                    timing[k] = max(timing.get(k) or 0.0, v)
            elif isinstance(v, (int, float)):
                timing[k] = timing.get(k, 0.0) + v
    active = set(active)
    complete = all(d >= p for d, p in progress.values())
    status = "running" if active else ("complete" if complete else "interrupted")
    rounds_ok = read_state(records, {"id": camp["id"], "arms": camp["arms"],
                                     "schedule": schedule}).complete()
    return {
        "id": camp["id"], "schema": SCHEMA_VERSION, "created": camp["created"],
        "status": status, "abbench": (first.abbench if first else None) or camp.get("abbench"),
        "config_path": camp["config_path"], "config_digest": camp["config_digest"],
        "arms": camp["arms"], "baseline": camp["baseline"],
        "rounds": sum(p for _, p in progress.values()), "rounds_done": len(rounds_ok),
        "reps": first.reps if first is not None and "reps" in first.model_fields_set
        else camp.get("reps", 1),
        "table": first.table if first is not None and "table" in first.model_fields_set
        else camp.get("table"),
        **({"stats": first.stats} if first is not None and "stats" in first.model_fields_set
           else {}),
        "order": camp["order"], "seed": camp["seed"], "schedule": schedule,
        "environment": env, "servers": servers, "timing": timing or None,
        "campaign": {"shards": len(progress), "slurm": camp.get("slurm") is not None,
                     "gathered": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                     "mixed_hosts": mixed, "rounds_per_shard": {
                         str(i): {"done": d, "planned": p} for i, (d, p) in progress.items()}},
        "hosts": [h.data() for h in hosts],
    }


def gather(folder: Path, *, allow_mixed_hosts: bool | None = None,
           active: Iterable[int] | None = None) -> Gathered:
    """Merge the campaign's shard folders into the campaign folder's own run files and
    render its report. ``active``: the shards still running, whose missing rounds are
    not failed yet; by default those with a shard folder whose run.json says running
    (a shard killed outright also says so: after its task has ended, pass ())."""
    camp = load_campaign(folder)
    problems: list[str] = []
    runs = shard_runs(folder, problems)
    if active is None:
        active = {s.index for s in runs if s.meta.status == "running"}
    mixed = mixed_hosts(runs)
    allow = camp.get("allow_mixed_hosts", False) if allow_mixed_hosts is None \
        else allow_mixed_hosts
    if mixed and not allow:
        raise ConfigError("the shards ran on hosts that differ: " + "; ".join(mixed),
                          where=str(folder),
                          hint="a ratio measured on one GPU model or driver need not hold "
                               "on another: run the campaign on like hosts (a --partition or "
                               "--constraint of one GPU type), or gather with "
                               "--allow-mixed-hosts to pool them anyway")
    records, schedule, progress = merge(camp, runs, active=active)
    meta = _merged_meta(camp, runs, schedule, progress, records, active, mixed)
    run = Run(folder)
    atomic_write(folder / SAMPLES_FILE, "".join(record_line(r) for r in records))
    run.write_meta(meta)
    table, report = write_run_report(run, records, run.info())
    failed = sum(1 for r in records if isinstance(r, SlotRecord) and r.failed)
    return Gathered(run, table, report, progress, failed, mixed, problems)
