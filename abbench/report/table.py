"""From stored records to the table people paste into pull requests, as data.

``build_table(records, meta)`` computes (no text but labels); :mod:`.markdown` and
:mod:`.formats` render. A row is one (workload row, metric); a cell is one arm's
per-round values (reps averaged within the round first) with its comparison
against the baseline, paired by round.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from abbench.config.stats import StatsConfig
from abbench.errors import ConfigError
from abbench.model.metrics import MetricSpec, catalogue, spec
from abbench.model.rounds import round_values
from abbench.report import quality
from abbench.report.notes import collector_notes, run_notes, side_call_notes
from abbench.stats.paired import Comparison, apply_holm, compare


@dataclass
class Cell:
    arm: str
    rounds: list[int]
    values: list[float]
    comparison: Comparison | None = None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)


@dataclass
class Row:
    workload: str
    metric: str
    spec: MetricSpec
    cells: dict[str, Cell]
    #: P/T rows (spec.denominator): arm -> round -> total, and the arm compared against
    totals: dict[str, dict[int, float]] | None = None
    baseline: str | None = None

    @property
    def label(self) -> str:
        unit = f" ({self.spec.unit})" if self.spec.unit else ""
        if self.workload == "server":
            return f"{self.spec.label}{unit}"
        if self.metric == "decode_tok_s":
            return f"{self.workload}{unit}"
        return f"{self.workload} {self.spec.label}{unit}"


@dataclass
class Table:
    run_id: str
    arms: list[str]
    labels: dict[str, str]
    baseline: str
    rows: list[Row]
    header: str
    footer: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failed_slots: list[dict[str, Any]] = field(default_factory=list)
    invalid: dict[str, int] = field(default_factory=dict)
    quality: quality.QualitySummary | None = None


def build_table(records: list[dict[str, Any]], meta: dict[str, Any], *,
                baseline: str | None = None, metrics: list[str] | None = None,
                settings: StatsConfig | None = None) -> Table:
    """``settings``: how verdicts are decided; default the run's stored ``stats``."""
    if settings is None:
        settings = StatsConfig.model_validate(meta.get("stats") or {})
    arms = [a["name"] for a in meta["arms"]]
    labels = {a["name"]: a.get("label") or a["name"] for a in meta["arms"]}
    base = baseline or meta.get("baseline") or arms[0]
    if base not in arms:
        raise ConfigError(f"baseline {base!r} is not an arm of run {meta['id']}",
                          hint=f"arms: {', '.join(arms)}")
    arms = [base] + [a for a in arms if a != base]
    known = catalogue(records)  # labels of collectors' metrics of the user's own
    values = round_values(records)
    rows: list[Row] = []
    for (workload, metric), by_arm in values.items():
        sp = spec(metric, known)
        if metrics is not None:
            if metric not in metrics:
                continue
        elif not sp.table:
            continue
        cells = {arm: Cell(arm, sorted(by_arm[arm]), [by_arm[arm][r] for r in sorted(by_arm[arm])])
                 for arm in arms if arm in by_arm}
        rows.append(Row(workload, metric, sp, cells))
    compare_rows(rows, base, settings=settings)
    score_rows(rows, values, base)

    invalid: dict[str, int] = defaultdict(int)
    for rec in records:
        if rec.get("type") == "sample" and not rec.get("valid", False):
            invalid[rec["arm"]] += 1
    failed = [r for r in records if r.get("type") == "slot" and r.get("status") == "failed"]
    table = Table(run_id=meta["id"], arms=arms, labels=labels, baseline=base, rows=rows,
                  header=_header(meta), failed_slots=failed, invalid=dict(invalid))
    table.footer = _footer(records, meta)
    table.notes += collector_notes(records)  # unavailable metrics, drift signals
    table.notes += run_notes(meta)  # how --until-ci chose the rounds
    table.notes += side_call_notes(records, meta)
    table.quality = quality.summarize(records, arms, base, alpha=settings.alpha)
    return table


def _header(meta: dict[str, Any]) -> str:
    env = meta.get("environment") or {}
    machine = env.get("gpu_summary") or env.get("cpu") or "unknown machine"
    order = meta.get("order", "?")
    seed = meta.get("seed")
    seed_s = f", seed {seed}" if seed is not None and order == "interleaved" else ""
    rounds = meta.get("rounds_done", meta.get("rounds"))
    reps = meta.get("reps", 1)
    return (f"abbench run `{meta['id']}`: {rounds} rounds x {reps} rep(s), order {order}"
            f"{seed_s}, on {machine} ({env.get('host', '?')})")


def timing_agreement(records: list[dict[str, Any]]) -> tuple[float, int] | None:
    """Median |client decode tok/s / server predicted_per_second - 1| over samples."""
    errs = []
    for rec in records:
        m = rec.get("metrics") or {}
        if rec.get("type") == "sample" and rec.get("valid") and m.get("server_decode_tok_s") \
                and m.get("decode_tok_s"):
            errs.append(abs(m["decode_tok_s"] / m["server_decode_tok_s"] - 1))
    if not errs:
        return None
    return statistics.median(errs), len(errs)


def _footer(records: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    out = []
    agree = timing_agreement(records)
    if agree is not None:
        out.append(f"Client/server timing agreement: median |client/server - 1| = "
                   f"{agree[0] * 100:.3f}% over {agree[1]} samples (server = llama.cpp "
                   "timings.predicted_per_second).")
    else:
        out.append("Client/server timing agreement: the server sent no timings to check "
                   "against.")
    wall = meta.get("timing") or {}
    if wall.get("wall_s"):
        share = wall.get("overhead_s", 0.0) / wall["wall_s"]
        lag = wall.get("ready_lag_ms_max")
        lag_s = f"; readiness noticed within {lag:.0f} ms of the server answering" \
            if lag is not None else ""
        out.append(f"Harness overhead: {share * 100:.2f}% of {wall['wall_s']:.1f} s wall time "
                   f"outside server start-up, requests and quality checks{lag_s}.")
    return out


def score_rows(rows: list[Row], values: dict[tuple[str, str], dict[str, dict[int, float]]],
               baseline: str) -> None:
    """Give P/T rows their totals (per arm and round) and the baseline they compare to."""
    for row in rows:
        if row.spec.denominator:
            row.totals = values.get((row.workload, row.spec.denominator), {})
            row.baseline = baseline


def compare_rows(rows: list[Row], baseline: str, *, settings: StatsConfig | None = None,
                 noise_band: float | None = None, alpha: float | None = None) -> None:
    """Compare every non-baseline cell of ``rows`` with the baseline, Holm across all."""
    s = settings or StatsConfig()
    if noise_band is not None or alpha is not None:
        s = s.model_copy(update={k: v for k, v in (("noise_band", noise_band),
                                                   ("alpha", alpha)) if v is not None})
    cells: list[Cell] = []
    comps: list[Comparison] = []
    for row in rows:
        base = row.cells.get(baseline)
        if base is None:
            continue
        b = dict(zip(base.rounds, base.values, strict=True))
        for arm, cell in row.cells.items():
            if arm == baseline:
                continue
            c = compare(b, dict(zip(cell.rounds, cell.values, strict=True)),
                        direction=row.spec.direction, alpha=s.alpha,
                        noise_band=s.band(row.metric), base_name=baseline, arm_name=arm)
            cell.comparison = c
            if c is not None:
                cells.append(cell)
                comps.append(c)
    for cell, c in zip(cells, apply_holm(comps), strict=True):
        cell.comparison = c
