"""Runs over time: listings, per-label series, regression checks, plots, a static
page, and the tidy DataFrame for notebooks.

Series come from the index (:mod:`abbench.store.index`); a point is one run's value of
one arm label: the mean of its per-round values, with the spread of the rounds
(min-max) as its interval. Detection is :mod:`abbench.stats.regression`.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import re
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, NamedTuple

from abbench.errors import ConfigError, StoreError
from abbench.model.metrics import Direction, spec
from abbench.model.records import Sample, WorkloadSample
from abbench.model.rounds import comparable_records
from abbench.report.markdown import header_text, render_cell
from abbench.report.table import Table
from abbench.stats import regression
from abbench.store.index import Index, RunInfo
from abbench.store.run import atomic_write, list_runs

XAxis = Literal["time", "commit"]


# ----------------------------------------------------------------- listing


def parse_when(text: str, *, end: bool = False) -> float:
    """``2026-11-29`` or an ISO date-time -> epoch seconds (local time when no zone);
    with ``end``, a bare date means the end of that day."""
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not a date", hint="write 2026-11-29 or "
                          "2026-11-29T14:30") from None
    if end and len(text) <= 10:
        t += dt.timedelta(days=1)
    if t.tzinfo is None:
        t = t.astimezone()
    return t.timestamp()


def _arm_text(run: RunInfo) -> str:
    parts = []
    for a in run.arms:
        text = a.label + (f" @{a.commit[:12]}" if a.commit else "")
        parts.append(f"{text} (base)" if a.name == run.baseline and len(run.arms) > 1 else text)
    return ", ".join(parts) or "-"


def _status_text(run: RunInfo) -> str:
    if run.error:
        return "unreadable"
    extra = []
    if run.n_failed_slots:
        extra.append(f"{run.n_failed_slots} failed slot(s)")
    if run.n_invalid:
        extra.append(f"{run.n_invalid} invalid sample(s)")
    return run.status + (f" ({', '.join(extra)})" if extra else "")


def format_runs(runs: list[RunInfo]) -> str:
    """One line per run: id, date, rounds, status, arms."""
    if not runs:
        return "no runs\n"
    rows = [("RUN", "DATE", "ROUNDS", "STATUS", "ARMS")]
    for r in runs:
        date = r.created[:16].replace("T", " ") if r.created else "?"  # as recorded
        rounds = f"{r.rounds_done if r.rounds_done is not None else '?'}/{r.rounds or '?'}"
        rows.append((r.id, date, rounds, _status_text(r), _arm_text(r)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "".join("  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True))
                   + "  " + row[4] + "\n" for row in rows)


# ----------------------------------------------------------------- series


class Point(NamedTuple):
    """One run's value of one arm label: the mean of its rounds, their min and max."""

    run_id: str
    created_ts: float | None
    commit: str | None
    value: float
    lo: float
    hi: float
    n_rounds: int


@dataclass(frozen=True)
class Series:
    """One arm label's values of one (metric, workload), oldest run first."""

    metric: str
    workload: str
    label: str
    points: tuple[Point, ...]

    @property
    def direction(self) -> Direction:
        return spec(self.metric).direction

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]

    @cached_property
    def segments(self) -> list[int]:
        """Start indices of its levels (computed once; :func:`regression.segments`)."""
        return regression.segments(self.values)


def default_metrics(index: Index) -> list[str]:
    """The metrics that appear as table rows, among those stored."""
    return sorted({m for m, _w in index.series_keys() if spec(m).table})


def build_series(index: Index, metrics: Iterable[str] | None = None,
                 workloads: Iterable[str] | None = None,
                 labels: Iterable[str] | None = None) -> list[Series]:
    """Every (metric, workload, label) series; only positive values (ratios are taken
    on the log scale). Two arms of one run with one label are kept apart by name."""
    metrics = set(metrics) if metrics is not None else set(default_metrics(index))
    wanted = set(workloads) if workloads is not None else None
    labels = list(labels) if labels is not None else None
    out = []
    for metric, workload in index.series_keys():
        if metric not in metrics or (wanted is not None and workload not in wanted):
            continue
        by_label: dict[str, list[Point]] = {}
        arm_of: dict[tuple[str, str], str] = {}
        for rv in index.run_values(metric, workload, labels):
            label = rv.label
            if arm_of.setdefault((rv.run_id, label), rv.arm) != rv.arm:
                label = f"{rv.label} [{rv.arm}]"
            by_label.setdefault(label, []).append(
                Point(rv.run_id, rv.created_ts, rv.commit, rv.mean, rv.lo, rv.hi, rv.n_rounds))
        out += [Series(metric, workload, label, tuple(pts)) for label, pts in by_label.items()]
    return out


# ----------------------------------------------------------------- checking


@dataclass(frozen=True)
class Regression:
    """The newest run regressed on one series."""

    metric: str
    workload: str
    label: str
    change: float  # newest level / old level - 1
    run_id: str  # the newest run
    since_run: str  # the first run at the new level
    ref_run: str  # the last run at the old level
    method: str
    z: float | None = None


@dataclass(frozen=True)
class CheckResult:
    newest: str | None
    threshold: float
    checked: int
    regressions: list[Regression] = field(default_factory=list)


def newest_run(series: list[Series]) -> str | None:
    ends = [(p.created_ts or 0.0, p.run_id) for s in series for p in s.points[-1:]]
    return max(ends)[1] if ends else None


def check_history(series: list[Series], *, threshold: float = 0.05, window: int = 20,
                  z_min: float = 3.0) -> CheckResult:
    """Did the newest run regress beyond ``threshold`` on any series it is part of?"""
    newest = newest_run(series)
    checked = 0
    found = []
    for s in series:
        if not s.points or s.points[-1].run_id != newest:
            continue
        checked += 1
        f = regression.check_newest(s.values, s.direction, threshold, window, z_min,
                                    starts=s.segments)
        if f is not None:
            found.append(Regression(s.metric, s.workload, s.label, f.change, s.points[-1].run_id,
                                    s.points[f.since].run_id, s.points[f.ref].run_id,
                                    f.method, f.z))
    return CheckResult(newest, threshold, checked, found)


def format_check(result: CheckResult) -> str:
    if result.newest is None:
        return "nothing to check: no stored values for these metrics\n"
    lines = []
    for r in result.regressions:
        sp = spec(r.metric)
        z = f", z = {r.z:+.1f}" if r.z is not None else ""
        lines.append(f"REGRESSION {r.metric} [{r.workload}] {r.label}: {r.change * 100:+.1f}% "
                     f"({sp.direction} is better) in run {r.run_id}, since run {r.since_run} "
                     f"(last good: {r.ref_run}; {r.method}{z})")
    if not result.regressions:
        lines.append(f"OK: run {result.newest} shows no regression beyond "
                     f"{result.threshold * 100:g}% ({result.checked} series checked)")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------- plotting


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


def _groups(series: list[Series]) -> dict[tuple[str, str], list[Series]]:
    out: dict[tuple[str, str], list[Series]] = {}
    for s in series:
        out.setdefault((s.metric, s.workload), []).append(s)
    return out


def plot_history(series: list[Series], out: Path, *, x: XAxis = "time",
                 threshold: float = 0.05) -> PlotSummary:
    """One panel per (metric, workload), one line per arm label, rounds' spread as
    the interval, regressions (steps beyond ``threshold``) marked. PNG or SVG by
    the suffix of ``out``."""
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise ConfigError(f"cannot write a {out.suffix or 'suffix-less'} image",
                          where=str(out), hint="name the file .png or .svg")
    if not series:
        raise ConfigError("nothing to plot: no stored values match",
                          hint="list what is stored with abbench ls; check --metric and "
                               "--workload (the row names of abbench report)")
    groups = _groups(series)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.4 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False)[:, 0]
    order = _commit_order(series) if x == "commit" else {}
    panels = []
    for ax, ((metric, workload), group) in zip(axes, groups.items(), strict=True):
        panels.append(_draw_panel(ax, metric, workload, group, x, order, threshold))
    if x == "commit":
        runs = sorted(order, key=order.__getitem__)
        ticks = _thin(list(range(len(runs))), 25)
        names = _tick_names(series)
        for ax in axes:
            ax.set_xticks(ticks, [names[runs[i]] for i in ticks], rotation=45, ha="right",
                          fontsize=7)
    else:
        for ax in axes:
            ax.tick_params(axis="x", labelrotation=30)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format=fmt, dpi=100)
    return PlotSummary(out, panels)


def _draw_panel(ax: Any, metric: str, workload: str, group: list[Series], x: XAxis,
                order: dict[str, int], threshold: float) -> Panel:
    sp = spec(metric)
    counts = {}
    marked = 0
    for s in group:
        if x == "commit":
            xs: list[Any] = [order[p.run_id] for p in s.points]
        else:
            xs = [dt.datetime.fromtimestamp(p.created_ts or 0.0) for p in s.points]
        ys = [p.value for p in s.points]
        lo = [p.value - p.lo for p in s.points]
        hi = [p.hi - p.value for p in s.points]
        if len(xs) <= 200:
            line = ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", ms=4, capsize=3, lw=1.2,
                               label=s.label)[0]
        else:
            line = ax.plot(xs, ys, "-", lw=0.8, label=s.label)[0]
            ax.fill_between(xs, [p.lo for p in s.points], [p.hi for p in s.points],
                            color=line.get_color(), alpha=0.2, lw=0)
        counts[s.label] = len(xs)
        bad = [st for st in regression.steps(s.values, s.direction, threshold,
                                             starts=s.segments) if st.regression]
        for st in bad:
            ax.plot([xs[st.start]], [ys[st.start]], "v", color="red", ms=10, zorder=5)
            if marked < 20:
                ax.annotate(f"{st.change * 100:+.1f}%", (xs[st.start], ys[st.start]),
                            textcoords="offset points", xytext=(4, -14), color="red",
                            fontsize=8)
            marked += 1
    better = "higher" if sp.direction == "higher" else "lower"
    unit = f" ({sp.unit})" if sp.unit else ""
    ax.set_title(f"{sp.label}{unit}: {workload}  [{better} is better; bars: min-max of "
                 f"rounds; red ▼: regression > {threshold * 100:g}%]", fontsize=9)
    ax.set_ylabel(f"{sp.label}{unit}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return Panel(metric, workload, counts, marked)


def _commit_order(series: list[Series]) -> dict[str, int]:
    runs = sorted({(p.created_ts or 0.0, p.run_id) for s in series for p in s.points})
    return {run_id: i for i, (_t, run_id) in enumerate(runs)}


def _tick_names(series: list[Series]) -> dict[str, str]:
    """A run's tick: the commits of its arms (first label's first), else its id."""
    names: dict[str, str] = {}
    for s in sorted(series, key=lambda s: s.label):
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


# ----------------------------------------------------------------- static page


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(table.labels[a])}</th>" for a in table.arms)
    rows = "".join(
        f"<tr><th>{html.escape(r.label)}</th>"
        + "".join(f"<td>{html.escape(render_cell(r, a))}</td>" for a in table.arms)
        + "</tr>" for r in table.rows)
    return (f"<p>{html.escape(header_text(table).replace('`', ''))}</p>\n"
            f"<table><tr><th></th>{head}</tr>{rows}</table>\n")


def write_html(series: list[Series], out_dir: Path, *, tables: list[Table], check: CheckResult,
               x: XAxis = "time", threshold: float = 0.05) -> Path:
    """``out_dir/index.html``: every metric's plot (SVG beside it), the check, and
    the latest run's table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>abbench history"
             "</title><style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
             "img{max-width:100%}.bad{color:#b00}</style></head><body>",
             "<h1>abbench history</h1>"]
    verdict = format_check(check)
    cls = " class='bad'" if check.regressions else ""
    parts.append(f"<h2>Newest run</h2><pre{cls}>{html.escape(verdict)}</pre>")
    for table in tables:
        parts.append(f"<h2>Latest table: run {html.escape(table.run_id)}</h2>")
        parts.append(table_html(table))
    parts.append("<h2>Metrics</h2>")
    for (metric, workload), group in _groups(series).items():
        name = f"plot-{_slug(metric)}-{_slug(workload)}.svg"
        plot_history(group, out_dir / name, x=x, threshold=threshold)
        parts.append(f"<h3>{html.escape(metric)}: {html.escape(workload)}</h3>"
                     f"<img src='{name}' alt='{html.escape(metric)} {html.escape(workload)}'>")
    parts.append("</body></html>\n")
    page = out_dir / "index.html"
    atomic_write(page, "\n".join(parts))
    return page


# ----------------------------------------------------------------- notebooks

#: the columns of :func:`load_samples`, in order (documented in docs/history.md)
SAMPLE_COLUMNS = ["run_id", "created", "run_status", "arm", "label", "commit", "is_baseline",
                  "round", "position", "rep", "slot", "host", "workload", "context",
                  "decode_tokens", "valid", "status", "comparable", "t", "metric", "value", "unit",
                  "direction"]


def load_samples(results_dir: Any = "results", problems: list[str] | None = None
                 ) -> Any:
    """Every stored sample under ``results_dir`` as a pandas DataFrame (pandas loads
    on first use): one row per sample and metric (columns: :data:`SAMPLE_COLUMNS`;
    ``comparable``: the sample is one its run's report compares, by
    :func:`abbench.model.rounds.comparable_records`). Corrupt lines and unreadable runs are
    skipped; they go to ``problems`` when given, else to one warning."""
    import pandas as pd

    own: list[str] = [] if problems is None else problems
    rows: list[tuple[Any, ...]] = []
    for run in list_runs(Path(results_dir)):
        try:
            meta = run.meta()
        except StoreError as e:
            own.append(str(e).replace("\n", "; "))
            continue
        arms = {a["name"]: a for a in meta.get("arms") or [] if isinstance(a, dict)}
        base = meta.get("baseline") or next(iter(arms), None)
        created = meta.get("created")
        status = meta.get("status")
        machine = (meta.get("environment") or {}).get("host")
        try:
            records = run.records(own)
        except StoreError as e:  # a record abbench cannot read: the run is skipped
            own.append(str(e).replace("\n", "; "))
            continue
        try:  # what the run's report compares: the one definition
            kept = {id(r) for r in comparable_records(records, meta)}
        except (KeyError, TypeError, ValueError) as e:
            own.append(f"{run.samples_path}: a record lacks a field ({e}); no sample of this "
                       "run is marked comparable")
            kept = set()
        for rec in records:
            if not isinstance(rec, Sample):
                continue
            arm = rec.arm
            info = arms.get(arm, {})
            context, decode = (rec.context, rec.decode_tokens) \
                if isinstance(rec, WorkloadSample) else (None, None)
            head = (run.id, created, status, arm, info.get("label") or arm, info.get("commit"),
                    arm == base, rec.round, rec.position, rec.rep, rec.slot,
                    rec.host or machine, rec.workload, context, decode, rec.valid, rec.status,
                    id(rec) in kept, rec.t)
            for metric, value in rec.metrics.items():
                sp = spec(metric)
                rows.append((*head, metric, value, sp.unit, sp.direction))
    df = pd.DataFrame.from_records(rows, columns=SAMPLE_COLUMNS)
    df["created"] = pd.to_datetime(df["created"], utc=True, format="ISO8601")
    df["t"] = pd.to_datetime(df["t"], unit="s", utc=True)
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    for col in ("round", "position", "rep", "slot", "context", "decode_tokens"):
        df[col] = df[col].astype("Int64")
    if problems is None and own:
        warnings.warn(f"{len(own)} problem(s) reading {results_dir}; first: {own[0]}",
                      stacklevel=2)
    return df


def format_series(series: list[Series]) -> str:
    """One line per series: runs, first and newest value."""
    if not series:
        return "no stored values match\n"
    lines = []
    for s in series:
        sp = spec(s.metric)
        first, last = s.points[0], s.points[-1]
        lines.append(f"{s.metric} [{s.workload}] {s.label}: {len(s.points)} run(s), first "
                     f"{sp.fmt(first.value)} ({first.run_id}), newest {sp.fmt(last.value)} "
                     f"({last.run_id}, {(last.value / first.value - 1) * 100:+.1f}%)")
    return "\n".join(lines) + "\n"
