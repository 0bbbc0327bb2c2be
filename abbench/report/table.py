"""From stored records to the table people paste into pull requests.

:func:`table_of` is the one door into a table: the report, ``compare``, ``--until-ci``,
``calibrate``, ``gather`` and ``bisect`` all take a run's records through it, so all see
the same comparable records (:func:`abbench.model.rounds.comparable_records`) and the
same verdicts. :mod:`.markdown` and :mod:`.formats` render. A row is one whole row key
(:class:`abbench.model.rows.RowKey`); a cell is one arm's per-round values (reps
averaged within the round first) with its comparison against the baseline, paired by
round.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Literal

from abbench.config.stats import StatsConfig, TableConfig
from abbench.errors import ConfigError
from abbench.model.metrics import catalogue, spec
from abbench.model.records import Record, Sample, SlotRecord, WorkloadSample
from abbench.model.rounds import RoundValues, comparable_records, round_values
from abbench.model.runmeta import Environment, MetaLike, RunMeta, as_meta
from abbench.report import quality_summary
from abbench.report.acceptance_note import acceptance_notes
from abbench.report.hosts import flag_notes, hosts_note, mixed_note, per_host_note
from abbench.report.notes import (
    collector_notes,
    exposure_notes,
    fault_notes,
    load_notes,
    replay_notes,
    run_notes,
    side_call_notes,
)
from abbench.report.selection import pick_rows
from abbench.report.setup import run_setup
from abbench.report.tablemodel import Cell, Note, Row, Table
from abbench.stats.blocks import round_hosts
from abbench.stats.cells import CellInput, compare_cells


def table_of(records: list[Record], meta: MetaLike, *,
             baseline: str | None = None, metrics: list[str] | None = None,
             rows: Literal["table", "all"] = "table",
             settings: StatsConfig | None = None,
             config: dict[str, Any] | None = None) -> Table:
    """The table of a run's records, as the run itself renders it: Pinpoint's rule
    leaves a round with a failed (arm, round) pair out of the comparison whole, and
    the notes say which pair failed and why. ``metrics``, ``rows``, ``settings``: as
    :func:`compute_table`. ``config``: the run's stored config.yaml, for the setup
    (server, each arm's differences from the baseline); without it the setup says
    what run.json knows."""
    meta = as_meta(meta)
    kept = comparable_records(records, meta)
    table = compute_table(kept, meta, baseline=baseline, metrics=metrics, rows=rows,
                          settings=settings)
    table.setup = run_setup(meta, config, table.baseline)
    table.notes.extend(fault_notes(records, meta))
    table.notes.extend(load_notes(kept))
    table.notes.extend(replay_notes(kept))
    table.notes.extend(exposure_notes(meta))
    return table


def compute_table(records: list[Record], meta: MetaLike, *,
                  baseline: str | None = None, metrics: list[str] | None = None,
                  rows: Literal["table", "all"] = "table",
                  settings: StatsConfig | None = None) -> Table:
    """The table of records already made comparable (:func:`table_of` does that for one
    run; :func:`abbench.report.compare.compare_table` for each of two). Every recorded
    (row, metric) compared, then split into the rows the table shows
    and the hidden rest. ``metrics``: show exactly these metrics' rows; ``rows="all"``:
    show every row; else the run's ``table:`` setting. ``settings``: how verdicts are
    decided; default the run's stored ``stats``, at the report's alpha of an --until-ci
    run (:func:`abbench.stats.stopping.look_alphas`)."""
    meta = as_meta(meta)
    if settings is None:
        settings = StatsConfig.model_validate(meta.stats or {})
        alpha_report = meta.until_ci.alpha_report if meta.until_ci is not None else None
        if alpha_report is not None:
            settings = settings.model_copy(update={"alpha": float(alpha_report)})
    arms = meta.arm_names
    labels = meta.labels
    base = baseline or meta.baseline or arms[0]
    if base not in arms:
        raise ConfigError(f"baseline {base!r} is not an arm of run {meta.id}",
                          hint=f"arms: {', '.join(arms)}")
    arms = [base] + [a for a in arms if a != base]
    known = catalogue(records)  # labels of collectors' metrics of the user's own
    values = round_values(records)
    every: list[Row] = []
    for key, by_arm in values.items():
        cells = {arm: Cell(arm, sorted(by_arm[arm]), [by_arm[arm][r] for r in sorted(by_arm[arm])])
                 for arm in arms if arm in by_arm}
        every.append(Row(key, spec(key.metric, known), cells))
    hosts = round_hosts(records)  # a gathered campaign's rounds, by host
    score_rows(every, values, base)
    if metrics is not None:
        shown = [r for r in every if r.metric in metrics]
    elif rows == "all":
        shown = list(every)
    else:
        shown = pick_rows(every, TableConfig.model_validate(meta.table or {}))
    picked = {id(r) for r in shown}
    compare_rows(every, base, settings=settings, hosts=hosts, shown=picked)

    invalid: dict[str, int] = defaultdict(int)
    for rec in records:
        if isinstance(rec, Sample) and not rec.valid:
            invalid[rec.arm] += 1
    failed = [r for r in records if isinstance(r, SlotRecord) and r.failed]
    table = Table(run_id=meta.id, arms=arms, labels=labels, baseline=base, rows=shown,
                  hidden=[r for r in every if id(r) not in picked], header=header_notes(meta),
                  failed_slots=failed, invalid=dict(invalid))
    table.footer = footer_notes(records, meta)
    table.notes += collector_notes(records)  # unavailable metrics, drift signals
    table.notes += run_notes(meta)  # how --until-ci chose the rounds
    table.notes += side_call_notes(records, meta)
    table.notes += acceptance_notes(records)
    table.quality = quality_summary.summarize(records, arms, base, alpha=settings.alpha)
    if hosts:
        line = hosts_note(meta)
        table.header += [line] if line else []
        refs = [(r.label, labels.get(a, a), c.comparison) for r in shown
                for a, c in r.cells.items() if a != base]
        table.notes += mixed_note(meta) + flag_notes(refs) + per_host_note(refs)
    table.notes += variant_notes(table, meta)
    return table


def variant_notes(table: Table, meta: RunMeta) -> list[Note]:
    """Per leave-one-out arm (a git arm whose patch set reverts commits from another
    arm's), which of the candidate's changed rows move back to the baseline without
    that commit, and whether its greedy fingerprints equal the baseline's."""
    gits = {a.name: a.git for a in meta.arms if a.git is not None}
    out = []
    for name, g in gits.items():
        reverted = [sha for op, sha in g.patch if op == "revert"]
        cands = [c for c, h in gits.items() if c != name and h.sha == g.sha
                 and len(h.patch) < len(g.patch)]
        if not reverted or not cands or name == table.baseline:
            continue
        cand = cands[0]
        back: list[str] = []
        still: list[str] = []
        for row in table.rows:
            c = row.cells.get(cand)
            v = row.cells.get(name)
            if c is None or v is None or c.comparison is None or v.comparison is None \
                    or c.comparison.verdict != "changed":
                continue
            (back if v.comparison.verdict == "within_noise" else still).append(row.label)
        same = [{"set": s.name, "differ": len(comp.diffs), "compared": comp.compared}
                for s in (table.quality.sets if table.quality else [])
                for comp in s.comparisons if comp.arm == name]
        out.append(Note("leave_one_out", {
            "label": table.labels.get(name, name), "candidate": cand,
            "reverted": [str(x) for x in reverted], "back": back, "still": still,
            "fingerprints": same}, arm=name))
    return out


def header_notes(meta: RunMeta) -> list[Note]:
    """What ran and where; the commit and patch set each git arm was built from."""
    env = meta.environment or Environment()
    out = [Note("run", {"run_id": meta.id, "rounds": meta.rounds_shown, "reps": meta.reps,
                        "order": meta.order or "?", "seed": meta.seed,
                        "machine": env.gpu_summary or env.cpu, "host": env.host})]
    builds = []
    for a in meta.arms:
        g = a.git
        if g is None or not g.sha:
            continue
        builds.append({"arm": a.name, "source": g.source, "sha": g.sha, "ref": g.ref,
                       "patch": [[op, sha] for op, sha in g.patch]})
    if builds:
        out.append(Note("builds", {"arms": builds}))
    return out


def timing_agreement(records: list[Record]) -> tuple[float, int] | None:
    """Median |client decode tok/s / server decode tok/s - 1| over samples."""
    errs = []
    for rec in records:
        if not isinstance(rec, Sample) or not rec.valid:
            continue
        client, server = rec.metrics.get("decode_tok_s"), rec.metrics.get("server_decode_tok_s")
        if client and server:
            errs.append(abs(client / server - 1))
    if not errs:
        return None
    return statistics.median(errs), len(errs)


def timing_sources(records: list[Record]) -> list[str]:
    """Which server field gave the server side of the agreement line."""
    out = []
    for rec in records:
        if not isinstance(rec, Sample) or not rec.metrics.get("server_decode_tok_s"):
            continue
        vllm = isinstance(rec, WorkloadSample) and (rec.server_metrics or {}).get(
            "generation_time_ms") is not None
        src = "vLLM metrics.generation_time_ms" if vllm else \
            "llama.cpp timings.predicted_per_second"
        if src not in out:
            out.append(src)
    return out


def footer_notes(records: list[Record], meta: RunMeta) -> list[Note]:
    """How well the client's timing agreed with the server's, and the harness's own
    share of the wall time."""
    agree = timing_agreement(records)
    out = [Note("timing_agreement", {"median": agree[0], "samples": agree[1],
                                     "sources": timing_sources(records)} if agree else
                {"median": None, "samples": 0, "sources": []})]
    wall = meta.timing
    if wall is not None and wall.wall_s:
        out.append(Note("harness_overhead", {"share": (wall.overhead_s or 0.0) / wall.wall_s,
                                             "wall_s": wall.wall_s,
                                             "ready_lag_ms": wall.ready_lag_ms_max}))
    return out


def score_rows(rows: list[Row], values: RoundValues, baseline: str) -> None:
    """Give P/T rows their totals (per arm and round) and the baseline they compare to."""
    for row in rows:
        if row.spec.denominator:
            row.totals = values.get(row.key.of(row.spec.denominator), {})
            row.baseline = baseline


def compare_rows(rows: list[Row], baseline: str, *, settings: StatsConfig | None = None,
                 noise_band: float | None = None, alpha: float | None = None,
                 hosts: Mapping[int, str] | None = None,
                 shown: set[int] | None = None) -> None:
    """Compare every non-baseline cell of ``rows`` with the baseline, through the one
    door (:func:`abbench.stats.cells.compare_cells`: each cell by its metric's kind, the
    timed ones' sds moderated in their family, multiplicity per family): ``shown``, the
    ids of the rows the table shows (default: every row). ``hosts``: round -> host when
    the rounds ran on several hosts (hosts as blocks)."""
    s = settings or StatsConfig()
    if noise_band is not None or alpha is not None:
        s = s.model_copy(update={k: v for k, v in (("noise_band", noise_band),
                                                   ("alpha", alpha)) if v is not None})
    cells: list[Cell] = []
    inputs: list[CellInput] = []
    for row in rows:
        base = row.cells.get(baseline)
        if base is None:
            continue
        b = dict(zip(base.rounds, base.values, strict=True))
        totals = row.totals or {}
        for arm, cell in row.cells.items():
            if arm == baseline:
                continue
            cells.append(cell)
            inputs.append(CellInput(
                row.metric, b, dict(zip(cell.rounds, cell.values, strict=True)),
                direction=row.spec.direction, alpha=s.alpha, noise_band=s.band(row.metric),
                base_name=baseline, arm_name=arm, hosts=hosts,
                totals=(totals[baseline], totals[arm])
                if baseline in totals and arm in totals else None,
                shown=shown is None or id(row) in shown))
    for cell, c in zip(cells, compare_cells(inputs), strict=True):
        cell.comparison = c


__all__ = ["Cell", "Note", "Row", "Table", "compare_rows", "compute_table", "pick_rows", "table_of",
           "timing_agreement"]
