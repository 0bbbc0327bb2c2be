"""Campaigns over many hosts: plan shards, run one, submit them to Slurm, follow, resume.

- :func:`plan_campaign` (``abbench run ARMS --shards N``) makes the campaign folder
  ``results/<id>/``: ``campaign.json`` (the arms file, its digest, the seed, each
  shard's rounds and seed), ``config.yaml``, and an empty run (``run.json``) that
  :func:`abbench.campaign.gather.gather` fills.
- :func:`run_shard` (``abbench shard run DIR --index i``, on the host it lands on)
  runs shard ``i``'s rounds there as an ordinary run in ``DIR/shards/<i>-<host>/``,
  with the host's fingerprint in its run.json. Run again on the same host, it
  resumes that folder; on another host, it runs the rounds still left in a new one.
- :func:`submit` sends shards to Slurm as one job array (one task per shard) through
  :mod:`abbench.campaign.slurm`; :func:`follow` polls the tasks and the shard folders
  and streams shards done, rounds done and an ETA.
- :func:`resume_campaign` (``abbench run --resume DIR``) follows tasks still running,
  submits again only the shards short of their rounds, and gathers.

Why ``sbatch`` directly and not submitit: see :mod:`abbench.campaign.slurm` (a task
here is a command line, ``python -m abbench shard run DIR --index i``, not a pickled
Python callable; the batch script stays readable and re-submittable by hand).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abbench.campaign import slurm
from abbench.campaign.environment import host_fingerprint
from abbench.campaign.gather import (
    ACTIVE,
    CAMPAIGN_FILE,
    SHARDS_DIR,
    Gathered,
    check_digest,
    gather,
    load_campaign,
    rounds_done,
    save_campaign,
    shard_plans,
    shard_runs,
)
from abbench.campaign.progress import Progress, SilentProgress
from abbench.campaign.resume import resume_run
from abbench.campaign.runner import Campaign, Resumption, RunOptions, RunOutcome, config_digest
from abbench.config.arms import resolve_arms
from abbench.config.loader import load_config
from abbench.config.schema import Config
from abbench.config.storage import config_for_storage
from abbench.errors import ConfigError, Interrupted
from abbench.model.schedule import new_seed
from abbench.model.shardplan import plan_shards, shard_schedule
from abbench.server.interrupts import handle_signals
from abbench.store.run import SCHEMA_VERSION, Run, new_run_id, open_run
from abbench.version import __version__

#: a progress line at least this often while following, even when nothing changed
EVERY_S = 60.0
#: where a shard's index comes from when ``--index`` is not given, first found wins
INDEX_VARS = ("JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID")


@dataclass(frozen=True)
class SlurmOptions:
    """How the shards are submitted (``abbench run --slurm``)."""

    partition: str | None = None
    gres: str | None = None
    time: str | None = None
    exclusive: bool = True
    extra_args: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "gres": self.gres, "time": self.time,
                "exclusive": self.exclusive, "extra_args": list(self.extra_args)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SlurmOptions:
        return cls(d.get("partition"), d.get("gres"), d.get("time"),
                   bool(d.get("exclusive", True)), tuple(d.get("extra_args") or ()))


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


def host_name() -> str:
    """This host's name as a folder name: ``$ABBENCH_HOST`` (a Kubernetes pod can set it
    to its node's name), else the host name, in ``[A-Za-z0-9._-]``, at most 48
    characters."""
    raw = os.environ.get("ABBENCH_HOST") or socket.gethostname().split(".")[0]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-.")
    return (name or "host")[:48]


# --------------------------------------------------------------------- planning


def default_shards(cfg: Config, rounds: int) -> int:
    """One shard per whole Latin block of rounds (one round of each position per arm)."""
    return max(1, rounds // len(cfg.arm_names))


def plan_campaign(cfg: Config, arms_file: Path, *, results: Path, rounds: int | None,
                  seed: int | None, shards: int | None, allow_mixed_hosts: bool = False,
                  slurm_opts: SlurmOptions | None = None) -> Path:
    """Make the campaign folder under ``results``; return it (absolute)."""
    if cfg.stats.until_ci is not None:
        raise ConfigError("--until-ci (stats.until_ci) cannot be split into shards: each "
                          "host would stop on its own", where=str(arms_file),
                          hint="give --rounds N (or rounds:) for a sharded campaign")
    n_rounds = rounds or cfg.rounds
    n_shards = shards or default_shards(cfg, n_rounds)
    if n_shards > n_rounds:
        raise ConfigError(f"--shards {n_shards} needs at least {n_shards} rounds, "
                          f"the campaign has {n_rounds}", where="--shards",
                          hint=f"--rounds {n_shards} or more, or fewer shards")
    seed = seed if seed is not None else (cfg.seed if cfg.seed is not None else new_seed())
    plans = plan_shards(len(cfg.arm_names), n_rounds, n_shards, seed)
    # fail before anything is written or submitted: the checks of a run's preflight
    # (programs must exist here too, as the hosts share this storage)
    Campaign(cfg, RunOptions(results=results), tasks=[])  # its checks run on construction
    campaign_id = new_run_id()
    created = _now()
    camp = {
        "schema": SCHEMA_VERSION, "id": campaign_id, "created": created,
        "abbench": __version__, "config_path": str(arms_file.resolve()),
        "config_digest": config_digest(cfg),
        "arms": [{"name": a.name, "label": a.label, "commit": a.commit, "preset": a.preset}
                 for a in resolve_arms(cfg)],
        "baseline": cfg.baseline_name, "rounds": n_rounds, "reps": cfg.reps,
        "order": cfg.order, "seed": seed, "table": cfg.table.model_dump(mode="json"),
        "shards": [{"index": p.index, "first_round": p.first_round, "rounds": p.rounds,
                    "seed": p.seed} for p in plans],
        "allow_mixed_hosts": allow_mixed_hosts,
        "slurm": slurm_opts.as_json() if slurm_opts is not None else None,
        "submissions": [], "task_states": {},
    }
    meta = {"id": campaign_id, "created": created, "status": "running", "abbench": __version__,
            "config_path": camp["config_path"], "config_digest": camp["config_digest"],
            "arms": camp["arms"], "baseline": camp["baseline"], "rounds": n_rounds,
            "rounds_done": 0, "reps": cfg.reps, "table": camp["table"], "order": cfg.order,
            "seed": seed, "schedule": [],
            "environment": {"host": f"{n_shards} shards, not gathered yet"}, "servers": {},
            "campaign": {"shards": n_shards, "slurm": slurm_opts is not None}, "hosts": []}
    run = Run.create(results, meta, config_for_storage(cfg))
    (run.path / SHARDS_DIR).mkdir()
    save_campaign(run.path, camp)
    return run.path.resolve()


def describe_campaign(folder: Path) -> str:
    """The plan and the command each host runs (for any scheduler)."""
    camp = load_campaign(folder)
    lines = [f"Campaign `{camp['id']}`: {camp['rounds']} rounds of {len(camp['arms'])} arms "
             f"in {len(camp['shards'])} shards (seed {camp['seed']}), in {folder}", "",
             "| shard | rounds | campaign rounds | seed |", "|---|---|---|---|"]
    for p in shard_plans(camp):
        span = f"{p.first_round}-{p.first_round + p.rounds - 1}" if p.rounds > 1 \
            else str(p.first_round)
        lines.append(f"| {p.index} | {p.rounds} | {span} | {p.seed} |")
    lines += ["", "Run each shard on its own host (the folder must be on storage every host "
              "sees, at the same path):", ""]
    lines += [f"    {shlex.join(shard_command(folder, p.index))}" for p in shard_plans(camp)]
    lines += ["", "or one command for any index, e.g. in a Kubernetes Indexed Job (the index "
              "from JOB_COMPLETION_INDEX):", "",
              f"    abbench shard run {shlex.quote(str(folder))}", "",
              "then, when they have ended:", "",
              f"    abbench gather {shlex.quote(str(folder))}", ""]
    return "\n".join(lines)


def shard_command(folder: Path, index: int) -> list[str]:
    return ["abbench", "shard", "run", str(folder), "--index", str(index)]


# --------------------------------------------------------------------- one shard


def shard_index(index: int | None) -> int:
    """``--index``, else the first of :data:`INDEX_VARS` that is set."""
    if index is not None:
        return index
    for var in INDEX_VARS:
        value = os.environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    raise ConfigError("no shard index", where="--index",
                      hint="give --index I, or run where JOB_COMPLETION_INDEX (Kubernetes "
                           "Indexed Job) or SLURM_ARRAY_TASK_ID is set")


@dataclass
class ShardOutcome:
    """What ``abbench shard run`` did: ran (or resumed) the shard, or found it complete."""

    folder: Path
    outcome: RunOutcome | None
    message: str


def run_shard(folder: Path, index: int | None, *, progress: Progress | None = None
              ) -> ShardOutcome:
    """Run (or go on with) shard ``index`` of the campaign in ``folder`` on this host."""
    folder = folder.resolve()
    camp = load_campaign(folder)
    i = shard_index(index)
    plans = {p.index: p for p in shard_plans(camp)}
    if i not in plans:
        raise ConfigError(f"the campaign has no shard {i}", where="--index",
                          hint=f"shards 0 to {len(plans) - 1}")
    plan = plans[i]
    cfg = load_config(camp["config_path"])
    check_digest(camp, cfg, camp["config_path"])
    mine = [s for s in shard_runs(folder) if s.index == i]
    done = sum(len(s.complete_rounds()) for s in mine)
    name = f"{i}-{host_name()}"
    here = folder / SHARDS_DIR / name
    if done >= plan.rounds:
        return ShardOutcome(here, None, f"shard {i} is complete: {done} of {plan.rounds} "
                                        "rounds finished")
    if (here / "run.json").is_file():
        return ShardOutcome(here, resume_run(str(here), here.parent, progress=progress),
                            f"shard {i}: resumed {here}")
    finished = {r for s in mine for r in s.complete_rounds() if r in plan.round_numbers}
    left = [r for r in plan.round_numbers if r not in finished][:plan.rounds - done]
    schedule = shard_schedule(cfg.arm_names, plan, cfg.order, camp["seed"], rounds=left)
    env_fp = host_fingerprint()
    opts = RunOptions(results=folder / SHARDS_DIR, rounds=len(left), seed=plan.seed,
                      config_path=camp["config_path"],
                      meta={"id": name, "host_fingerprint": env_fp,
                            "order_seed": camp["seed"],
                            "shard": {"index": i, "campaign": camp["id"],
                                      "campaign_dir": str(folder), "rounds": left,
                                      "campaign_seed": camp["seed"]}})
    runner = Campaign(cfg, opts, progress=progress)
    runner.run = run = runner.create_run(schedule, plan.seed)
    return ShardOutcome(here, runner.execute(resume=Resumption(run, schedule)),
                        f"shard {i}: ran in {here}")


# --------------------------------------------------------------------- Slurm


def submit(folder: Path, indexes: list[int], *, camp: dict[str, Any] | None = None) -> str:
    """Submit shards ``indexes`` as one job array; note it in campaign.json."""
    camp = camp if camp is not None else load_campaign(folder)
    opts = SlurmOptions.from_json(camp.get("slurm") or {})
    commands = [[sys.executable, "-m", "abbench", "shard", "run", str(folder), "--index",
                 str(i), "--plain"] for i in indexes]
    job = slurm.submit_array(output_dir=folder / "slurm", commands=commands,
                             job_name=f"abbench-{camp['id']}", partition=opts.partition,
                             gres=opts.gres, time=opts.time, exclusive=opts.exclusive,
                             env={"PYTHONUNBUFFERED": "1"}, workdir=Path.cwd(),
                             extra_args=opts.extra_args)
    camp.setdefault("submissions", []).append(
        {"job": job, "tasks": {str(t): i for t, i in enumerate(indexes)}, "submitted": _now()})
    for t, i in enumerate(indexes):
        camp.setdefault("task_states", {})[str(i)] = {"job": job, "task": t, "state": "PENDING"}
    save_campaign(folder, camp)
    return job


def task_states(folder: Path, camp: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Shard index -> its latest task (job, task, state), from Slurm now."""
    latest: dict[int, tuple[str, int]] = {}
    for sub in camp.get("submissions") or []:
        for t, i in sub["tasks"].items():
            latest[int(i)] = (str(sub["job"]), int(t))
    out: dict[int, dict[str, Any]] = {}
    for job in sorted({j for j, _ in latest.values()}):
        n = max(int(t) for sub in camp["submissions"] if str(sub["job"]) == job
                for t in sub["tasks"]) + 1
        states = slurm.task_states(job, n_tasks=n, output_dir=folder / "slurm")
        for i, (j, t) in latest.items():
            if j == job:
                out[i] = {"job": j, "task": t, "state": states.get(t, slurm.UNKNOWN)}
    return out


@dataclass
class FollowState:
    """What one poll saw, for the progress line."""

    states: dict[int, dict[str, Any]]
    done: dict[int, int]
    planned: dict[int, int]
    started: float | None = None
    #: rounds done when following began (a resumed campaign has some already)
    done_before: int = 0

    def line(self, now: float) -> tuple[str, str]:
        """The progress line, and its part without the ETA (what has to change for a
        new line)."""
        words: dict[str, int] = {}
        for i, st in self.states.items():
            if self.done.get(i, 0) >= self.planned.get(i, 0):
                key = "done"
            else:
                key = str(st["state"]).lower()
            words[key] = words.get(key, 0) + 1
        shards = ", ".join(f"{n} {w}" for w, n in sorted(words.items()))
        d, p = sum(self.done.values()), sum(self.planned.values())
        eta = "?"
        if self.started is not None and self.done_before < d < p:
            left = (now - self.started) / (d - self.done_before) * (p - d)
            eta = f"{int(left) // 60}m{int(left) % 60:02d}s"
        elif d >= p:
            eta = "0m00s"
        what = f"shards: {shards}; rounds done {d}/{p}"
        return f"{what}; ETA {eta}", what


def follow(folder: Path, *, progress: Progress, poll_s: float = 2.0,
           timeout_s: float | None = None,
           sleep: Callable[[float], None] = time.sleep) -> dict[int, dict[str, Any]]:
    """Poll the shards' tasks and folders until every task has ended; stream a line
    when something changed. Returns shard -> its task's final state (kept in
    campaign.json). Ctrl-C stops following, not the tasks."""
    camp = load_campaign(folder)
    plans = {p.index: p.rounds for p in shard_plans(camp)}
    jobs = sorted({str(s["job"]) for s in camp.get("submissions") or []})
    started: float | None = None
    done_before: int | None = None
    last, last_t = "", 0.0
    states: dict[int, dict[str, Any]] = {}
    stop = threading.Event()
    try:
        with handle_signals(stop):
            for p in slurm.polls(lambda: task_states(folder, camp),
                                 lambda st: {i: s["state"] for i, s in st.items()},
                                 poll_s=poll_s, timeout_s=timeout_s, sleep=sleep):
                states = p.reading
                done = rounds_done(shard_plans(camp), shard_runs(folder))
                if done_before is None:
                    done_before = sum(done.values())
                if started is None and any(s["state"] != "PENDING" for s in states.values()):
                    started = time.monotonic()
                line, what = FollowState(states, done, plans, started, done_before).line(
                    time.monotonic())
                if what != last or time.monotonic() - last_t >= EVERY_S:
                    progress.log(line)
                    last, last_t = what, time.monotonic()
                if p.done or not states:  # nothing submitted: nothing to follow
                    break
                if p.overdue:
                    raise Interrupted(f"stopped following after {timeout_s:g} s",
                                      hint=_follow_hint(folder, jobs))
    except Interrupted as e:
        raise Interrupted(f"{e.message}; the shards keep running in Slurm job(s) "
                          f"{', '.join(jobs)}", hint=_follow_hint(folder, jobs)) from None
    camp = load_campaign(folder)
    camp["task_states"] = {str(i): s for i, s in states.items()}
    save_campaign(folder, camp)
    return states


def _follow_hint(folder: Path, jobs: list[str]) -> str:
    return (f"`abbench run --resume {folder}` follows them again and gathers; "
            f"`abbench cancel {folder}` stops them")


def cancel_campaign(folder: Path) -> list[str]:
    """Cancel every Slurm job the campaign submitted (each noted in its ``<job>.cancel``,
    so a task cancelled while pending reads CANCELLED, not UNKNOWN); the jobs cancelled.
    ``abbench run --resume`` then gathers what the shards measured and submits again
    those short of their rounds."""
    camp = load_campaign(folder)
    jobs = list(dict.fromkeys(str(s["job"]) for s in camp.get("submissions") or []))
    if not jobs:
        raise ConfigError(f"campaign {camp.get('id')} submitted no Slurm job",
                          where=str(folder), hint="only a Slurm campaign has jobs to cancel")
    for job in jobs:
        slurm.cancel(job, output_dir=folder / "slurm")
    return jobs


@dataclass
class CampaignOutcome:
    folder: Path
    gathered: Gathered
    log: list[str] = field(default_factory=list)


def run_on_slurm(folder: Path, *, progress: Progress | None = None, poll_s: float = 2.0
                 ) -> CampaignOutcome:
    """Submit every shard of a planned campaign, follow the tasks, gather."""
    progress = progress or SilentProgress()
    camp = load_campaign(folder)
    indexes = [p.index for p in shard_plans(camp)]
    job = submit(folder, indexes, camp=camp)
    progress.log(f"campaign {camp['id']}: {len(indexes)} shards submitted as Slurm job "
                 f"array {job} (task files in {folder / 'slurm'})")
    follow(folder, progress=progress, poll_s=poll_s)
    return _gathered(folder, [])


def _gathered(folder: Path, log: list[str], *, ended: bool = True) -> CampaignOutcome:
    """Gather; ``ended``: every shard's task has ended (else shard folders that say
    running are taken as running)."""
    g = gather(folder, active=() if ended else None)
    for i in g.missing():
        d, p = g.progress[i]
        log.append(f"shard {i}: {d} of {p} rounds")
    if g.missing():
        log.append(f"rounds are missing: `abbench run --resume {folder}` runs them")
    return CampaignOutcome(folder, g, log)


def find_campaign(ref: str, results: Path) -> Path | None:
    """The campaign folder ``ref`` names (a folder, an id or a unique prefix), or None
    when ``ref`` names an ordinary run."""
    for p in (Path(ref), results / ref):
        if (p / CAMPAIGN_FILE).is_file():
            return p.resolve()
    try:
        run = open_run(ref, results)
    except Exception:  # not a run either: the ordinary resume says why
        return None
    return run.path.resolve() if (run.path / CAMPAIGN_FILE).is_file() else None


def resume_campaign(folder: Path, *, progress: Progress | None = None, poll_s: float = 2.0
                    ) -> CampaignOutcome:
    """``abbench run --resume CAMPAIGN``: follow the shards still running, submit again
    those short of their rounds (Slurm campaigns), gather. A campaign without Slurm is
    gathered, and the commands of the shards left are listed."""
    progress = progress or SilentProgress()
    camp = load_campaign(folder)
    plans = shard_plans(camp)
    done = rounds_done(plans, shard_runs(folder))
    short = [p.index for p in plans if done.get(p.index, 0) < p.rounds]
    if camp.get("slurm") is None:
        return _gathered(folder, [f"shard {i} is short of its rounds: run "
                                  f"`{shlex.join(shard_command(folder, i))}`" for i in short],
                         ended=False)
    states = task_states(folder, camp) if camp.get("submissions") else {}
    running = [i for i, s in states.items() if s["state"] in ACTIVE]
    again = [i for i in short if i not in running]
    if again:
        job = submit(folder, again, camp=camp)
        progress.log(f"campaign {camp['id']}: shard(s) {', '.join(map(str, again))} submitted "
                     f"again as Slurm job array {job}")
    if running:
        progress.log(f"campaign {camp['id']}: following shard(s) "
                     f"{', '.join(map(str, running))}, still in Slurm")
    if again or running:
        follow(folder, progress=progress, poll_s=poll_s)
    else:
        progress.log(f"campaign {camp['id']}: every shard has its rounds; gathering")
    return _gathered(folder, [])
