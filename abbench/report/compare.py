"""Tables of stored runs: one run re-rendered from its samples alone, or one arm of
a run against an arm of another (rounds paired by index: not interleaved)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml

from abbench.errors import ConfigError, StoreError
from abbench.model.records import Record, Sample
from abbench.model.rounds import comparable_records
from abbench.model.runmeta import ArmMeta, Environment, RunMeta
from abbench.report.export import render_bencher, render_github
from abbench.report.formats import render_csv, render_json
from abbench.report.markdown import Report, render_markdown, render_report
from abbench.report.pareto_plot import write_capacity
from abbench.report.setup import fill_vars, flag_diffs
from abbench.report.sweep import write_sweep
from abbench.report.table import Note, Table, compute_table, table_of
from abbench.store.run import Run, open_run

Format = Literal["md", "json", "csv", "bencher", "github"]

RENDERERS = {"md": render_markdown, "json": render_json, "csv": render_csv,
             "bencher": render_bencher, "github": render_github}


def render(table: Table, fmt: Format) -> str:
    return RENDERERS[fmt](table)


def run_table(run: Run, *, baseline: str | None = None, problems: list[str] | None = None,
              rows: Literal["table", "all"] = "table") -> Table:
    """A stored run's table, computed again from its samples."""
    return table_of(run.records(problems), run.info(), baseline=baseline, rows=rows,
                    config=stored_config(run.path))


def write_run_report(run: Run, records: list[Record], meta: RunMeta) -> tuple[Table, Report]:
    """Write a run's report.md and report.json, with its sweep and capacity plots where it
    has load levels or a capacity search: what ``run``, ``--resume`` and ``gather`` leave."""
    table = table_of(records, meta, config=stored_config(run.path))
    if write_sweep(records, meta, run.path / "sweep.png"):
        table.notes.append(Note("sweep_plot", {"path": "sweep.png"}))
    if write_capacity(records, meta, run.path / "capacity.png"):
        table.notes.append(Note("capacity_plot", {"path": "capacity.png"}))
    report = render_report(table)
    run.write_text("report.md", report.text)
    run.write_text("report.json", render_json(table))
    return table, report


def stored_config(folder: Path) -> dict[str, Any] | None:
    """A run folder's config.yaml, or None when it is missing or unreadable (the
    table is then shown without the arms' differences)."""
    try:
        data = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def parse_run_arm(ref: str, results: Path) -> tuple[Run, str | None]:
    """``RUN`` or ``RUN:ARM`` (a folder path may itself hold a colon)."""
    try:
        return open_run(ref, results), None
    except StoreError:
        if ":" not in ref:
            raise
    run_ref, arm = ref.rsplit(":", 1)
    return open_run(run_ref, results), arm or None


def _pick_arm(meta: RunMeta, arm: str | None, where: str) -> ArmMeta:
    name = arm or meta.baseline or (meta.arms[0].name if meta.arms else None)
    found = meta.arm(name) if name is not None else None
    if found is not None:
        return found
    raise ConfigError(f"run {meta.id} has no arm {name!r}", where=where,
                      hint=f"arms: {', '.join(meta.arm_names)}; write RUN:ARM")


def _side(run: Run, arm: ArmMeta, key: str,
          problems: list[str] | None) -> list[Record]:
    """The arm's comparable records (those its own run's report compares) renamed to
    ``key``, the rounds they measured renumbered 0, 1, ... in order."""
    recs = [r for r in comparable_records(run.records(problems), run.info())
            if r.arm == arm.name and r.round is not None]
    rounds = sorted({r.round for r in recs if isinstance(r, Sample)})
    index = {r: i for i, r in enumerate(rounds)}
    return [r.model_copy(update={"arm": key, "round": index[r.round]}) for r in recs
            if r.round in index]


def compare_table(a: tuple[Run, str | None], b: tuple[Run, str | None], *,
                  problems: list[str] | None = None) -> Table:
    """Arm ``a`` (baseline) against arm ``b``, each of its own stored run; an omitted
    arm is that run's baseline. The i-th round of one is paired with the i-th of
    the other."""
    (run_a, arm_a), (run_b, arm_b) = a, b
    meta_a, meta_b = run_a.info(), run_b.info()
    info_a = _pick_arm(meta_a, arm_a, str(run_a.path))
    info_b = _pick_arm(meta_b, arm_b, str(run_b.path))
    key_a, key_b = f"{run_a.id}:{info_a.name}", f"{run_b.id}:{info_b.name}"
    if key_a == key_b:
        raise ConfigError("both sides are the same arm of the same run",
                          hint="name another run or arm: abbench compare RUN_A[:ARM] "
                               "RUN_B[:ARM]")
    same_run = run_a.path.resolve() == run_b.path.resolve()
    records = _side(run_a, info_a, key_a, problems) + \
        _side(run_b, info_b, key_b, problems)

    def label(run: Run, info: ArmMeta) -> str:
        return info.shown if same_run else f"{info.shown} ({run.id})"

    meta = RunMeta(id=f"{run_a.id} vs {run_b.id}", baseline=key_a,
                   arms=[ArmMeta(name=key_a, label=label(run_a, info_a)),
                         ArmMeta(name=key_b, label=label(run_b, info_b))])
    table = compute_table(records, meta)  # each side made comparable by _side
    n_a = len({r.round for r in records if r.arm == key_a})
    n_b = len({r.round for r in records if r.arm == key_b})
    table.header = [Note("compare", {"run_a": run_a.id, "arm_a": info_a.name,
                                     "run_b": run_b.id, "arm_b": info_b.name,
                                     "rounds_a": n_a, "rounds_b": n_b})]
    unlike = None if same_run else unlike_runs(run_a, info_a, run_b, info_b)
    if unlike is not None:  # at the top: a reader must see it before the numbers
        table.header.append(unlike)
    if not same_run:
        table.notes.append(Note("compare_not_interleaved"))
        env_a = meta_a.environment or Environment()
        env_b = meta_b.environment or Environment()
        for k in ("host", "gpu_summary", "cpu", "driver"):
            if getattr(env_a, k) != getattr(env_b, k):
                table.notes.append(Note("compare_environment_differs",
                                        {"field": k, "a": getattr(env_a, k),
                                         "b": getattr(env_b, k)}))
    return table


def _name(w: dict[str, Any]) -> str:
    return str(w.get("name") or ("load" if w.get("load") else "decode"))


def _workloads(config: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored config's workloads as data: name, and its load or its contexts and
    decode tokens."""
    out = []
    for w in config.get("workloads") or []:
        if not isinstance(w, dict):
            continue
        name = _name(w)
        if w.get("load"):
            out.append({"name": name, "load": w["load"]})
        else:
            out.append({"name": name, "contexts": list(w.get("contexts") or []),
                        "decode_tokens": w.get("decode_tokens")})
    return out


def _aspects(config: dict[str, Any]) -> dict[str, Any]:
    """What a stored config's workloads measure, aspect by aspect: the contexts and
    decode tokens of its decode workloads, how many of them run side calls, and each
    workload's name (a load, sessions or trace workload is told by its name) with the
    rest of its settings."""
    ws = [w for w in config.get("workloads") or [] if isinstance(w, dict)]
    decodes = [w for w in ws if w.get("contexts")]
    return {"contexts": sorted({c for w in decodes for c in w["contexts"]
                                if isinstance(c, int)}),
            "decode_tokens": sorted({w["decode_tokens"] for w in decodes
                                     if isinstance(w.get("decode_tokens"), int)}),
            "side_calls": sum(1 for w in decodes if w.get("side_calls")),
            "workloads": [_name(w) for w in ws], "settings": ws}


def _argv(config: dict[str, Any], arm: str) -> list[str] | None:
    vars_ = config.get("vars") or {}
    for a in config.get("resolved_arms") or []:
        if isinstance(a, dict) and a.get("name") == arm:
            return [fill_vars(str(w), vars_) for w in a.get("argv") or []]
    return None


def unlike_runs(run_a: Run, info_a: ArmMeta, run_b: Run, info_b: ArmMeta) -> Note | None:
    """What differs between two runs' setups that a comparison of their arms would
    read as the arms' difference: the workloads (contexts, decode tokens) and the
    compared arms' start commands; None when nothing does (or a config is missing)."""
    ca, cb = stored_config(run_a.path), stored_config(run_b.path)
    if ca is None or cb is None:
        return None
    wa, wb = _workloads(ca), _workloads(cb)
    argv_a, argv_b = _argv(ca, info_a.name), _argv(cb, info_b.name)
    flags = list(flag_diffs(argv_a, argv_b)) if argv_a is not None and argv_b is not None \
        else []
    aa, ab = _aspects(ca), _aspects(cb)
    differ = [{"what": k, "a": aa[k], "b": ab[k]} for k in aa if aa[k] != ab[k]]
    if differ and differ[-1]["what"] == "settings":  # named by a closer aspect, or alone
        differ = differ[:-1] or [{"what": "settings", "a": None, "b": None}]
    if not differ and not flags:
        return None
    return Note("compare_unlike", {"run_a": run_a.id, "run_b": run_b.id,
                                   "workloads_a": wa if differ else None,
                                   "workloads_b": wb if differ else None,
                                   "differences": differ, "flags": flags})
