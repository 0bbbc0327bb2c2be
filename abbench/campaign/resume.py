"""``abbench run --resume RUN``: continue an interrupted (or partly failed) run.

Finished (arm, round) pairs are kept; the slots left run in their scheduled order;
a round with a failed pair is run again at the end under a new round number, in
the same arm order (see :mod:`abbench.model.rounds`). The arms file is read again from
``run.json``'s ``config_path`` and must still have the run's ``config_digest``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from abbench.campaign.progress import Progress
from abbench.campaign.runner import Campaign, Resumption, RunOptions, RunOutcome, config_digest
from abbench.config.loader import load_config
from abbench.errors import ConfigError
from abbench.model.records import SlotRecord
from abbench.model.rounds import plan_resume
from abbench.server.gitarms import build_arms, pin, pins_of
from abbench.store.run import open_run


def _still_running(pid: object) -> bool:
    """True when the abbench that wrote the run (pid from run.json) is alive."""
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        cmd = " ".join(proc.cmdline())
        return proc.status() != psutil.STATUS_ZOMBIE and "abbench" in cmd
    return False


def resume_run(ref: str, results: Path, *, progress: Progress | None = None) -> RunOutcome:
    """Continue run ``ref`` (id, unique prefix or folder) stored under ``results``."""
    run = open_run(ref, results)
    run.take_writer()  # a second abbench resuming the same run stops here (exit 2)
    meta = run.info()
    where = str(run.path / "run.json")
    if meta.status == "running" and _still_running(meta.pid):
        raise ConfigError(f"run {run.id} is still running (abbench pid {meta.pid})",
                          where=where, hint="wait for it, or stop it (Ctrl-C) and resume then")
    config_path = meta.config_path
    if not config_path:
        raise ConfigError("the run does not say which arms file it ran", where=where,
                          hint="start a new run with abbench run ARMS_FILE")
    if not Path(config_path).is_file():
        raise ConfigError(f"the run's arms file {config_path} is gone", where=where,
                          hint="put it back where it was (unchanged), then resume again")
    cfg, _ = build_arms(pin(load_config(config_path), pins_of(meta)),
                        log=progress.log if progress is not None else None)
    digest = config_digest(cfg)
    if digest != meta.config_digest:
        raise ConfigError(
            f"the arms file changed since the run started (config digest {digest}, the run "
            f"has {meta.config_digest})", where=config_path,
            hint=f"restore it as it was (the run's copy is {run.path / 'config.yaml'}; "
                 "environment variables count too), or start a new run")
    repaired = run.repair_tail()
    records = run.records()
    slots, reruns = plan_resume(records, meta)
    opts = RunOptions(results=run.path.parent, rounds=meta.rounds, seed=meta.seed,
                      config_path=config_path)
    campaign = Campaign(cfg, opts, progress=progress)
    now = campaign.prompt_digests()
    if "prompts" in meta.model_fields_set and now != meta.prompts:
        changed = sorted(k for k in {*meta.prompts, *now} if meta.prompts.get(k) != now.get(k))
        raise ConfigError(f"the prompt file of workload {', '.join(map(repr, changed))} changed "
                          "since the run started (its sha256 differs from run.json's)",
                          where=config_path, hint="restore it as it was, or start a new run")
    if not slots and meta.status == "complete":
        raise ConfigError(f"run {run.id} is complete: every (arm, round) pair finished",
                          where=str(run.path), hint="start a new run for more rounds")
    schedule = [*meta.schedule, *((s.round, s.position, s.arm) for s in slots)]
    resumes = [*meta.resumes, {"pid": os.getpid(), "slots": len(slots), "repaired": repaired}]
    run.update_meta(status="running", pid=os.getpid(), schedule=schedule,
                    reruns={str(k): v for k, v in reruns.items()}, resumes=resumes)
    if repaired and progress is not None:
        progress.log(repaired)
    if progress is not None:
        kept = sum(1 for r in records if isinstance(r, SlotRecord) and r.ok)
        again = ", ".join(f"round {k} as round {v}" for k, v in sorted(reruns.items()))
        progress.log(f"resuming run {run.id}: {kept} server lives kept, {len(slots)} to run"
                     + (f"; failed rounds run again: {again}" if again else ""))
    return campaign.execute(resume=Resumption(run, slots))

