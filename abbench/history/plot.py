"""The history as an image (``abbench history --out h.png``): one panel per row,
one line per series, steps called changed marked. Matplotlib, loaded on first use."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from abbench.errors import ConfigError
from abbench.history.series import Series, sort_key
from abbench.model.metrics import spec

XAxis = Literal["time", "commit"]
LEGEND_COLUMNS = 2

@dataclass(frozen=True)
class Panel:
    metric: str
    workload: str
    points: dict[str, int]  # label -> points plotted
    marked: int  # regressions marked


@dataclass(frozen=True)
class PlotSummary:
    path: Path
    panels: list[Panel]


def groups(series: list[Series]) -> dict[tuple[str, str], list[Series]]:
    """Series by (metric, workload), in :func:`sort_key` order of context."""
    out: dict[tuple[str, str], list[Series]] = {}
    for s in sorted(series, key=lambda s: (s.metric, *sort_key(s)[3:], s.name)):
        out.setdefault((s.metric, s.workload), []).append(s)
    return out


def plot_history(series: list[Series], out: Path, *, x: XAxis = "time",
                 threshold: float = 0.05) -> PlotSummary:
    """One panel per (metric, workload), one line per series, each run's 95% interval,
    steps called changed marked (red when a regression beyond ``threshold``). PNG or
    SVG by the suffix of ``out``."""
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise ConfigError(f"cannot write a {out.suffix or 'suffix-less'} image",
                          where=str(out), hint="name the file .png or .svg")
    if not series:
        raise ConfigError("nothing to plot: no stored values match",
                          hint="list what is stored with abbench ls; check --metric and "
                               "--workload (the row names of abbench report)")
    by_row = groups(series)
    from matplotlib.figure import Figure

    # each panel's legend sits below it, LEGEND_COLUMNS names a line: room for its lines
    heights = [3.4 + 0.25 * math.ceil(len(g) / LEGEND_COLUMNS) + (0.6 if x == "commit" else 0)
               for g in by_row.values()]
    fig = Figure(figsize=(10, sum(heights)), layout="constrained")
    axes = fig.subplots(len(by_row), 1, squeeze=False, height_ratios=heights)[:, 0]
    order = _commit_order(series) if x == "commit" else {}
    panels = []
    for ax, ((metric, workload), group) in zip(axes, by_row.items(), strict=True):
        panels.append(_draw_panel(ax, metric, workload, group, x, order, threshold))
    if x == "commit":
        runs = sorted(order, key=order.__getitem__)
        ticks = _thin(list(range(len(runs))), 25)
        names = _tick_names(series)
        for ax in axes:
            ax.set_xticks(ticks)
            ax.set_xticklabels([names[runs[i]] for i in ticks], rotation=45, ha="right",
                               fontsize=7)
    else:
        for ax in axes:
            ax.tick_params(axis="x", labelrotation=30)
    out.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # a layout that does not fit is drawn as it is
        warnings.simplefilter("ignore", UserWarning)
        fig.savefig(out, format=fmt, dpi=100)
    return PlotSummary(out, panels)


def _draw_panel(ax: Any, metric: str, workload: str, group: list[Series], x: XAxis,
                order: dict[str, int], threshold: float) -> Panel:
    sp = spec(metric)
    counts = {}
    marked = 0
    styles = itertools.cycle([f"{m}-" for m in "os^Dvp*hX"])
    for s in group:
        if x == "commit":
            xs: list[Any] = [order[p.run_id] for p in s.points]
        else:
            xs = [dt.datetime.fromtimestamp(p.created_ts or 0.0) for p in s.points]
        ys = [p.value for p in s.points]
        lo = [p.value - p.lo for p in s.points]
        hi = [p.hi - p.value for p in s.points]
        name = _legend_name(s, tokens=len({g.key.decode_tokens for g in group}) > 1)
        style = next(styles)
        if len(xs) <= 200:
            line = ax.errorbar(xs, ys, yerr=[lo, hi], fmt=style, ms=4, capsize=3, lw=1.2,
                               label=name)[0]
        else:
            line = ax.plot(xs, ys, style[1:], lw=0.8, label=name)[0]
            ax.fill_between(xs, [p.lo for p in s.points], [p.hi for p in s.points],
                            color=line.get_color(), alpha=0.2, lw=0)
        counts[name] = len(xs)
        for st in s.change_points:
            if st.verdict != "changed":
                continue
            bad = st.worse and abs(st.change) > threshold
            ax.plot([xs[st.start]], [ys[st.start]], "v" if st.worse else "^",
                    color="red" if bad else "grey", ms=10, zorder=5)
            if marked < 20:
                ax.annotate(f"{st.change * 100:+.1f}%", (xs[st.start], ys[st.start]),
                            textcoords="offset points", xytext=(4, -14),
                            color="red" if bad else "grey", fontsize=8)
            marked += 1
    better = "higher" if sp.direction == "higher" else "lower"
    unit = f" ({sp.unit})" if sp.unit else ""
    ax.set_title(f"{group[0].row_label}  [{better} is better; bars: 95% interval of each "
                 f"run's rounds; ▼/▲ step called changed, red: regression > "
                 f"{threshold * 100:g}%]", fontsize=9)
    ax.set_ylabel(f"{sp.label}{unit}")
    ax.grid(True, alpha=0.3)
    ncol = min(LEGEND_COLUMNS, max(1, len(group)))
    ax.legend(fontsize=7, loc="upper center", ncol=ncol,
              bbox_to_anchor=(0.5, -0.36 if x == "commit" else -0.18),
              frameon=False)
    return Panel(metric, workload, counts, marked)


def _commit_order(series: list[Series]) -> dict[str, int]:
    runs = sorted({(p.created_ts or 0.0, p.run_id) for s in series for p in s.points})
    return {run_id: i for i, (_t, run_id) in enumerate(runs)}


def _tick_names(series: list[Series]) -> dict[str, str]:
    """A run's tick: the commits of its arms (first label's first), else its id."""
    names: dict[str, str] = {}
    for s in sorted(series, key=lambda s: s.name):
        for p in s.points:
            if p.commit and p.run_id not in names:
                names[p.run_id] = p.commit[:10]
    for s in series:
        for p in s.points:
            names.setdefault(p.run_id, p.run_id)
    counts = Counter(names.values())
    repeated = {c for c, n in counts.items() if n > 1}
    return {run_id: f"{c} {run_id}" if c in repeated and c != run_id else c
            for run_id, c in names.items()}


def _thin(xs: list[int], most: int) -> list[int]:
    step = max(1, math.ceil(len(xs) / most))
    return xs[::step]


def _legend_name(s: Series, *, tokens: bool = False) -> str:
    """Its display name and model; its decode length where the panel has several."""
    model = f" [{s.key.model}]" if s.key.model else ""
    decode = f", {s.key.decode_tokens} tokens decoded" if tokens else ""
    return f"{s.display}{model}{decode}"
