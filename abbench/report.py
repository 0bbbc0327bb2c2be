"""From stored records to the table people paste into pull requests.

``build_table(records, meta)`` computes (no printing); ``render_markdown`` and
``render_json`` render. A row is one (workload row, metric); a cell is one arm's
per-round values (reps averaged within the round first) with its comparison
against the baseline, paired by round.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from abbench import quality_report, stats
from abbench.collectors.base import register_stored_specs
from abbench.collectors.drift import collector_notes
from abbench.metrics import MetricSpec, spec


@dataclass
class Cell:
    arm: str
    rounds: list[int]
    values: list[float]
    comparison: stats.Comparison | None = None

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
    quality: quality_report.QualitySummary | None = None


RoundValues = dict[tuple[str, str], dict[str, dict[int, float]]]


def _round_values(records: list[dict[str, Any]]) -> RoundValues:
    """(workload, metric) -> arm -> round -> mean of the valid reps."""
    acc: dict[tuple[str, str], dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for rec in records:
        if rec.get("type") != "sample" or not rec.get("valid", False):
            continue
        for metric, value in (rec.get("metrics") or {}).items():
            if value is None or not math.isfinite(value):
                continue
            acc[(rec["workload"], metric)][rec["arm"]][int(rec["round"])].append(float(value))
    return {k: {arm: {r: statistics.fmean(v) for r, v in rounds.items()}
                for arm, rounds in by_arm.items()} for k, by_arm in acc.items()}


def build_table(records: list[dict[str, Any]], meta: dict[str, Any], *,
                baseline: str | None = None, metrics: list[str] | None = None,
                settings: stats.StatsConfig | None = None) -> Table:
    """``settings``: how verdicts are decided; default the run's stored ``stats``."""
    if settings is None:
        settings = stats.StatsConfig.model_validate(meta.get("stats") or {})
    arms = [a["name"] for a in meta["arms"]]
    labels = {a["name"]: a.get("label") or a["name"] for a in meta["arms"]}
    base = baseline or meta.get("baseline") or arms[0]
    if base not in arms:
        from abbench.errors import ConfigError
        raise ConfigError(f"baseline {base!r} is not an arm of run {meta['id']}",
                          hint=f"arms: {', '.join(arms)}")
    arms = [base] + [a for a in arms if a != base]
    register_stored_specs(records)  # labels of collectors' metrics of the user's own
    values = _round_values(records)
    rows: list[Row] = []
    for (workload, metric), by_arm in values.items():
        sp = spec(metric)
        if metrics is not None:
            if metric not in metrics:
                continue
        elif not sp.table:
            continue
        cells = {arm: Cell(arm, sorted(by_arm[arm]), [by_arm[arm][r] for r in sorted(by_arm[arm])])
                 for arm in arms if arm in by_arm}
        rows.append(Row(workload, metric, sp, cells))
    stats.compare_rows(rows, base, settings=settings)
    quality_report.score_rows(rows, values, base)

    invalid: dict[str, int] = defaultdict(int)
    for rec in records:
        if rec.get("type") == "sample" and not rec.get("valid", False):
            invalid[rec["arm"]] += 1
    failed = [r for r in records if r.get("type") == "slot" and r.get("status") == "failed"]
    table = Table(run_id=meta["id"], arms=arms, labels=labels, baseline=base, rows=rows,
                  header=_header(meta), failed_slots=failed, invalid=dict(invalid))
    table.footer = _footer(records, meta)
    table.notes += collector_notes(records)  # unavailable metrics, drift signals
    table.notes += stats.run_notes(meta)  # how --until-ci chose the rounds
    table.notes += side_call_notes(records, meta)
    table.quality = quality_report.summarize(records, arms, base, alpha=settings.alpha)
    return table


def side_call_notes(records: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """Side calls against a server with one slot queue behind the long decode: they
    measure the wait, not concurrent service. Said for every arm whose server says so
    (llama.cpp's /props ``total_slots``)."""
    with_side = {r["arm"] for r in records
                 if r.get("type") == "sample" and "side_call_ms" in (r.get("metrics") or {})}
    out = []
    for arm in sorted(with_side):
        slots = ((meta.get("servers") or {}).get(arm) or {}).get("total_slots")
        if slots == 1:
            out.append(f"Warning: arm {arm}'s server has one slot (/props total_slots = 1): "
                       "its side calls waited for the long decode to end; start it with -np 2 "
                       "or more to serve them alongside.")
    return out


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


# ----------------------------------------------------------------- rendering


def md_escape(text: str) -> str:
    """Escape text for a markdown table cell: pipes, newlines, HTML."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|").replace("\r", " ").replace("\n", " "))


def fmt_values(sp: MetricSpec, values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) <= 3:
        return " / ".join(sp.fmt(v) for v in values)
    return f"{sp.fmt(min(values))}-{sp.fmt(max(values))}"


def render_cell(row: Row, arm: str) -> str:
    cell = row.cells.get(arm)
    if row.spec.denominator:
        return quality_report.render_score_cell(row, arm)
    if cell is None:
        return "no data"
    text = fmt_values(row.spec, cell.values)
    if cell.comparison is not None:
        text += " " + stats.render_comparison(cell.comparison)
    return text


def render_markdown(table: Table) -> str:
    lines = [table.header, ""]
    heads = [md_escape(table.labels[a]) for a in table.arms]
    lines.append("| | " + " | ".join(heads) + " |")
    lines.append("|---" * (len(heads) + 1) + "|")
    for row in table.rows:
        cells = [render_cell(row, a) for a in table.arms]
        lines.append(f"| {md_escape(row.label)} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.extend(stats.legend_lines(table))
    if table.invalid:
        parts = ", ".join(f"{md_escape(table.labels[a])}: {n}" for a, n in table.invalid.items())
        lines.append(f"Invalid samples (wrong token count or failed; left out): {parts}.")
    for f in table.failed_slots:
        lines.append(f"Failed: arm {md_escape(f['arm'])}, round {f['round']}: "
                     f"{md_escape(f.get('reason') or 'unknown')}.")
    lines.extend(table.footer)
    lines.extend(quality_report.render_section(table))
    details = stats.details_lines(table)
    if details:
        lines += ["", "<details><summary>Statistics per row</summary>", "", *details, "",
                  "</details>"]
    for n in table.notes:
        lines.append(n)
    return "\n".join(lines).rstrip() + "\n"


def render_json(table: Table) -> str:
    out = {
        "run_id": table.run_id,
        "baseline": table.baseline,
        "arms": [{"name": a, "label": table.labels[a]} for a in table.arms],
        "rows": [
            {
                "workload": r.workload,
                "metric": r.metric,
                "label": r.label,
                "unit": r.spec.unit,
                "direction": r.spec.direction,
                "cells": {
                    a: {
                        "rounds": c.rounds,
                        "values": c.values,
                        "mean": c.mean,
                        **({"verdict": c.comparison.verdict,
                            "comparison": stats.as_json(c.comparison)} if c.comparison else {}),
                    }
                    for a, c in r.cells.items()
                },
            }
            for r in table.rows
        ],
        "invalid": table.invalid,
        "failed": [{"arm": f["arm"], "round": f["round"], "reason": f.get("reason")}
                   for f in table.failed_slots],
        "footer": table.footer,
        "quality": quality_report.to_json(table.quality),
    }
    return json.dumps(out, indent=2, default=str) + "\n"


def render_csv(table: Table) -> str:
    """One line per (row, arm): its per-round values and, for the other arms, every
    field of the comparison against the baseline (``cmp_*``)."""
    import csv
    import io
    from dataclasses import asdict

    cmp_fields = sorted({k for r in table.rows for c in r.cells.values() if c.comparison
                         for k in asdict(c.comparison)})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["run_id", "workload", "metric", "label", "unit", "direction", "arm",
                "arm_label", "is_baseline", "rounds", "values", "mean", "min", "max",
                *(f"cmp_{k}" for k in cmp_fields)])
    for r in table.rows:
        for arm in table.arms:
            c = r.cells.get(arm)
            if c is None:
                continue
            cmp = asdict(c.comparison) if c.comparison else {}
            w.writerow([table.run_id, r.workload, r.metric, r.label, r.spec.unit,
                        r.spec.direction, arm, table.labels[arm], arm == table.baseline,
                        ";".join(map(str, c.rounds)), ";".join(repr(v) for v in c.values),
                        repr(c.mean), repr(min(c.values)), repr(max(c.values)),
                        *(cmp.get(k, "") for k in cmp_fields)])
    return buf.getvalue()
