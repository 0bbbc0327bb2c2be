"""A run's table for the stores teams already run: Bencher Metric Format JSON (for
``bencher run --adapter json``) and a GitHub job summary / PR comment."""

from __future__ import annotations

import json
import math
import statistics

from scipy.stats import t as t_dist

from abbench.report.markdown import render_markdown
from abbench.report.table import Table


def measure_slug(metric: str) -> str:
    """A Bencher measure slug (at most 64 characters): ``decode_tok_s`` -> ``decode-tok-s``."""
    return metric.replace("_", "-").lower()[:64]


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean of the rounds and its 95% t interval (the one value when there is one)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = float(t_dist.ppf(0.975, len(values) - 1)) * statistics.stdev(values) \
        / math.sqrt(len(values))
    return mean, mean - half, mean + half


def render_bencher(table: Table) -> str:
    """BMF JSON: one benchmark per (arm, row), ``<arm name>: <row id>`` (the name, not
    the label, which for a git arm carries the commit and would start a new benchmark
    each run), one measure per metric with ``value`` (the rounds' mean) and
    ``lower_value``/``upper_value`` (its 95% interval)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for row in table.rows + table.hidden:
        for arm, cell in row.cells.items():
            vals = [v for v in cell.values if math.isfinite(v)]
            if not vals:
                continue
            mean, lo, hi = interval(vals)
            name = f"{arm}: {row.workload}"
            out.setdefault(name, {})[measure_slug(row.metric)] = {
                "value": mean, "lower_value": lo, "upper_value": hi}
    return json.dumps(out, indent=2, sort_keys=True) + "\n"


def render_github(table: Table) -> str:
    """A job summary / PR comment: a heading naming the run, then the markdown table
    with its legend and notes (GitHub renders the pipe table as it is)."""
    return f"### abbench run `{table.run_id}`\n\n{render_markdown(table)}"
