"""Runs over time: listings, the series that follow one deployment across runs, and
the tidy DataFrame for notebooks.

Series come from the index (:mod:`abbench.store.index`), keyed by :class:`SeriesKey`;
a point is one run's value of one series: the mean of its per-round values with their
95% interval, the rounds kept for the change-point judge
(:mod:`abbench.stats.regression`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import statistics
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from scipy.stats import t as t_dist

from abbench.config.stats import StatsConfig
from abbench.errors import ConfigError, StoreError
from abbench.model.metrics import Direction, spec
from abbench.model.records import Sample, WorkloadSample
from abbench.model.rounds import comparable_records
from abbench.model.rows import RowKey
from abbench.report.tablemodel import row_label
from abbench.stats import regression
from abbench.store.index import Index, KeyedRound, RunInfo
from abbench.store.run import list_runs

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
    """One run's value of one series: the mean of its rounds, with its 95% interval
    (the rounds' t interval; the one value when there is one round), the rounds
    themselves, and what the run measured: commit, build key, config digest, label."""

    run_id: str
    created_ts: float | None
    commit: str | None
    build_key: str | None
    config_digest: str | None
    label: str
    rounds: tuple[float, ...]
    value: float
    lo: float
    hi: float

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)


class SeriesKey(NamedTuple):
    """What a series follows across runs: one deployment (the arm's declared series,
    else its name), one row (its whole key) and one metric, on one model file. A
    change of model, context, decode length or side calls starts another series."""

    name: str
    workload: str
    context: int | None
    decode_tokens: int | None
    side_calls: bool
    metric: str
    model: str | None


@dataclass(frozen=True)
class Series:
    """One series' points, oldest run first."""

    key: SeriesKey
    points: tuple[Point, ...]

    @property
    def metric(self) -> str:
        return self.key.metric

    @property
    def workload(self) -> str:
        return self.key.workload

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def direction(self) -> Direction:
        return spec(self.metric).direction

    @property
    def row_label(self) -> str:
        """The metric named as the table names its row: ``decode 32K (tok/s)``."""
        return row_label(RowKey(self.workload, self.metric), spec(self.metric))

    @property
    def display(self) -> str:
        """Its name as people read it: the newest label, with the arm's name when the
        label does not start with it (``prod (a)``; ``fork 1a2b3c4`` as it is)."""
        label = self.points[-1].label if self.points else self.name
        return label if label.startswith(self.name) else f"{label} ({self.name})"

    @property
    def title(self) -> str:
        model = f" [{self.key.model}]" if self.key.model else ""
        return f"{self.display}: {self.row_label}{model}"

    @property
    def slug(self) -> str:
        k = self.key  # the row id holds the context and side calls; not the decode length
        tokens = f"{k.decode_tokens}t" if k.decode_tokens is not None else ""
        return _slug(f"{k.name}-{k.metric}-{k.workload}-{tokens}-{k.model or ''}")

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]

    @property
    def commits(self) -> tuple[str | None, str | None]:
        return self.points[0].commit, self.points[-1].commit

    @cached_property
    def change_points(self) -> list[regression.ChangePoint]:
        """Its steps with their verdicts (computed once; :mod:`abbench.stats.regression`)."""
        return regression.change_points([p.rounds for p in self.points], self.direction,
                                        band=self.band)

    @property
    def band(self) -> float:
        return StatsConfig().band(self.metric)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def sort_key(s: Series) -> tuple[Any, ...]:
    """Series in a stable order: by name, model, metric, then context (numeric), decode
    length, side calls."""
    k = s.key
    return (k.name, k.model or "", k.metric, k.context if k.context is not None else -1,
            k.decode_tokens or 0, k.side_calls, k.workload)


def default_metrics(index: Index) -> list[str]:
    """The metrics that appear as table rows, among those stored."""
    return sorted({m for m, _w in index.series_keys() if spec(m).table})


def _point(run_id: str, rows: list[KeyedRound]) -> Point:
    first = rows[0]
    vals = tuple(r.value for r in rows)
    mean = statistics.fmean(vals)
    if len(vals) > 1:
        half = float(t_dist.ppf(0.975, len(vals) - 1)) * statistics.stdev(vals) \
            / math.sqrt(len(vals))
    else:
        half = 0.0
    return Point(run_id, first.created_ts, first.commit, first.build_key, first.config_digest,
                 first.label, vals, mean, mean - half, mean + half)


def build_series(index: Index, metrics: Iterable[str] | None = None,
                 workloads: Iterable[str] | None = None,
                 labels: Iterable[str] | None = None, *,
                 rows: Iterable[RowKey] | None = None) -> list[Series]:
    """Every series of the stored runs (:class:`SeriesKey`), only positive values
    (ratios are taken on the log scale); ``workloads`` keeps these row ids, ``rows``
    these rows (of any metric when a row's metric is empty: what
    :func:`abbench.report.selection.name_rows` makes of what a user typed), ``labels``
    the series whose name or any point's label is one of them."""
    named = list(rows) if rows is not None else None
    metrics = set(metrics) if metrics is not None else set(default_metrics(index)) | {
        r.metric for r in named or [] if r.metric}
    wanted = set(workloads) if workloads is not None else None
    if named is not None:
        wanted = {r.workload for r in named} & (wanted if wanted is not None else
                                                 {r.workload for r in named})
    by_key: dict[SeriesKey, dict[str, list[KeyedRound]]] = {}
    for kr in index.keyed_rounds(sorted(metrics), None if wanted is None else sorted(wanted)):
        if kr.value <= 0:
            continue
        key = SeriesKey(kr.series or kr.arm, kr.workload, kr.context, kr.decode_tokens,
                        kr.side_calls, kr.metric, kr.model)
        by_key.setdefault(key, {}).setdefault(kr.run_id, []).append(kr)
    out = [Series(key, tuple(_point(run_id, rows) for run_id, rows in runs.items()))
           for key, runs in by_key.items()]
    if named is not None:
        out = [s for s in out if any(r.workload == s.workload and r.metric in ("", s.metric)
                                     for r in named)]
    if labels is not None:
        names = set(labels)
        out = [s for s in out if s.name in names or any(p.label in names for p in s.points)]
    return sorted(out, key=sort_key)


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
            meta = run.info()
        except StoreError as e:
            own.append(str(e).replace("\n", "; "))
            continue
        arms = {a.name: a for a in meta.arms}
        base = meta.baseline or next(iter(arms), None)
        created, status = meta.created, meta.status
        machine = meta.environment.host if meta.environment is not None else None
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
            info = arms.get(arm)
            context, decode = (rec.context, rec.decode_tokens) \
                if isinstance(rec, WorkloadSample) else (None, None)
            head = (run.id, created, status, arm, info.shown if info else arm,
                    info.commit if info else None,
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
    """One line per series: its key, runs, first and last commit, first and newest
    value."""
    if not series:
        return "no stored values match\n"
    lines = []
    for s in series:
        sp = spec(s.metric)
        first, last = s.points[0], s.points[-1]
        c0, c1 = (c[:12] if c else "-" for c in s.commits)
        lines.append(f"{s.title}: {len(s.points)} run(s), commits {c0}..{c1}, first "
                     f"{sp.fmt(first.value)} ({first.run_id}), newest {sp.fmt(last.value)} "
                     f"({last.run_id}, {(last.value / first.value - 1) * 100:+.1f}%)")
    return "\n".join(lines) + "\n"
