"""The sweep plot of a run's load workloads: throughput against latency, per arm.

For each load workload (rows ``load c=1``, ``load c=8``, ...), two panels: output
tok/s against TTFT p99, and against ITL p50, one line per arm through its levels.
The baseline sits at its mean over the rounds; every other arm at the baseline
times (1 + its paired change), with the paired interval of the change (the
table's, 90% at alpha 5%) as error bars on both axes. matplotlib is
imported only when a plot is drawn.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abbench.config.stats import StatsConfig
from abbench.model.records import LoadSample, Record
from abbench.model.rounds import comparable_records, round_values
from abbench.model.rows import RowKey
from abbench.model.runmeta import MetaLike, as_meta
from abbench.stats.paired import compare

X_METRIC = "load_output_tok_s"
Y_METRICS = (("load_ttft_p99_ms", "TTFT p99 (ms)"), ("load_itl_p50_ms", "ITL p50 (ms)"))


@dataclass
class Point:
    level: str
    #: metric -> (value, interval low, interval high); no interval for the baseline
    values: dict[str, tuple[float, float | None, float | None]] = field(default_factory=dict)


def sweep_points(records: list[Record], meta: MetaLike
                 ) -> dict[str, dict[str, list[Point]]]:
    """workload title -> arm -> its points, in level order."""
    meta = as_meta(meta)
    records = comparable_records(records, meta)
    settings = StatsConfig.model_validate(meta.stats or {})
    arms = meta.arm_names
    base = meta.baseline or arms[0]
    levels: dict[str, list[tuple[RowKey, str]]] = {}  # title -> [(row, level)]
    for r in records:
        if isinstance(r, LoadSample) and r.level:
            row, level = r.row_key(), r.level
            title = r.workload.removesuffix(" " + level)
            if (row, level) not in levels.setdefault(title, []):
                levels[title].append((row, level))
    values = round_values(records)
    out: dict[str, dict[str, list[Point]]] = {}
    for title, rows in levels.items():
        per_arm: dict[str, list[Point]] = {a: [] for a in arms}
        for row, level in rows:
            points = {a: Point(level) for a in arms}
            for metric in (X_METRIC, *(m for m, _ in Y_METRICS)):
                by_arm = values.get(row.of(metric), {})
                b = by_arm.get(base)
                if not b:
                    continue
                b_mean = statistics.fmean(b.values())
                points[base].values[metric] = (b_mean, None, None)
                for arm in arms:
                    if arm == base or not by_arm.get(arm):
                        continue
                    c = compare(b, by_arm[arm], alpha=settings.alpha,
                                noise_band=settings.band(metric))
                    if c is None or c.change is None or c.lo is None or c.hi is None:
                        points[arm].values[metric] = (statistics.fmean(by_arm[arm].values()),
                                                      None, None)
                        continue
                    points[arm].values[metric] = (b_mean * (1 + c.change),
                                                  b_mean * (1 + c.lo), b_mean * (1 + c.hi))
            for a in arms:
                if X_METRIC in points[a].values:
                    per_arm[a].append(points[a])
        out[title] = {a: p for a, p in per_arm.items() if p}
    return {t: v for t, v in out.items() if v}


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files (imported only when a plot is drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_sweep(records: list[Record], meta: MetaLike, path: Path) -> bool:
    """Draw ``path`` (PNG or SVG) when the run has load rows; False when it has none."""
    meta = as_meta(meta)
    data = sweep_points(records, meta)
    if not data:
        return False
    plt, labels = pyplot(), meta.labels
    fig, axes = plt.subplots(len(data), len(Y_METRICS), figsize=(11, 4.2 * len(data)),
                             squeeze=False)
    for i, (title, per_arm) in enumerate(data.items()):
        for j, (metric, ylabel) in enumerate(Y_METRICS):
            ax = axes[i][j]
            for arm, points in per_arm.items():
                pts = [p for p in points if metric in p.values]
                if not pts:
                    continue
                xs = [p.values[X_METRIC] for p in pts]
                ys = [p.values[metric] for p in pts]
                xerr = [[x - (lo if lo is not None else x) for x, lo, _ in xs],
                        [(hi if hi is not None else x) - x for x, _, hi in xs]]
                yerr = [[y - (lo if lo is not None else y) for y, lo, _ in ys],
                        [(hi if hi is not None else y) - y for y, _, hi in ys]]
                ax.errorbar([x for x, _, _ in xs], [y for y, _, _ in ys], xerr=xerr,
                            yerr=yerr, marker="o", capsize=3, label=labels.get(arm, arm))
                if arm != next(iter(per_arm)):  # levels named once, beside the first arm's
                    continue
                for p, (x, _, _), (y, _, _) in zip(pts, xs, ys, strict=True):
                    ax.annotate(p.level, (x, y), textcoords="offset points", xytext=(4, 4),
                                fontsize=8)
            _limits(ax, per_arm, metric)
            ax.set_xlabel("output (tok/s)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{title}: throughput against {ylabel.split(' (')[0]}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    return save(plt, fig, path, f"abbench run {meta.id}: other arms at the baseline "
                "x (1 + paired change), bars: its paired interval (cut at 3x the largest point)")


def save(plt: Any, fig: Any, path: Path, title: str) -> bool:
    """Title, lay out, write and close ``fig``."""
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _limits(ax: Any, per_arm: dict[str, list[Point]], metric: str) -> None:
    """Axes from 0 to a little beyond the points and their bars, but no further than 3x
    the largest point: a few rounds give bars so wide they would flatten the curve."""
    for m, setter in ((X_METRIC, ax.set_xlim), (metric, ax.set_ylim)):
        vals = [p.values[m] for pts in per_arm.values() for p in pts if m in p.values]
        if not vals:
            continue
        top = max(v for v, _, _ in vals)
        reach = max([top] + [hi for _, _, hi in vals if hi is not None])
        setter(0, min(reach, 3 * top) * 1.08 or 1.0)
