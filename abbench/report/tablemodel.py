"""The table as data: cells, rows (each a whole :class:`RowKey`), the table. A row's
label is made here (:func:`row_label`), the one place a row key becomes words."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from abbench.model.metrics import MetricSpec
from abbench.model.records import SlotRecord
from abbench.model.rows import SERVER_ROW, RowKey
from abbench.report import quality_summary
from abbench.report.setup import RunSetup
from abbench.stats.paired import Comparison


def row_label(key: RowKey, spec: MetricSpec) -> str:
    """``decode 32K (tok/s)``, ``decode 32K TTFT (ms)``, ``peak VRAM (MiB)``."""
    unit = f" ({spec.unit})" if spec.unit else ""
    if key.workload == SERVER_ROW:
        return f"{spec.label}{unit}"
    if key.metric == "decode_tok_s":
        return f"{key.workload}{unit}"
    return f"{key.workload} {spec.label}{unit}"


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
    #: what the row measures, the whole key (a whole-server-life row has no context)
    key: RowKey
    spec: MetricSpec
    cells: dict[str, Cell]
    #: P/T rows (spec.denominator): arm -> round -> total, and the arm compared against
    totals: dict[str, dict[int, float]] | None = None
    baseline: str | None = None

    @property
    def workload(self) -> str:
        """The row id its samples carry."""
        return self.key.workload

    @property
    def metric(self) -> str:
        return self.key.metric

    @property
    def label(self) -> str:
        return row_label(self.key, self.spec)


@dataclass(frozen=True)
class Note:
    """One thing the report says beside the table, as data: what it is (``kind``), the
    arm, row id and round it is about, and its figures (numbers, names, reasons). Only
    :mod:`abbench.report.markdown` puts it in words; report.json carries it whole."""

    kind: str
    figures: dict[str, Any] = field(default_factory=dict)
    arm: str | None = None
    row: str | None = None
    round: int | None = None


@dataclass
class Table:
    run_id: str
    arms: list[str]
    labels: dict[str, str]
    baseline: str
    #: the rows the PR table shows, in order (``table:`` in the arms file)
    rows: list[Row]
    #: what ran, where, built from what (a run's or a comparison's; hosts of a campaign)
    header: list[Note]
    #: every other row: in the details and report.json, and named under the table
    #: when one of its cells changed
    hidden: list[Row] = field(default_factory=list)
    #: lines under the legend: timing agreement, harness overhead
    footer: list[Note] = field(default_factory=list)
    #: lines at the end: rounds left out, unavailable metrics, drift, hosts, ...
    notes: list[Note] = field(default_factory=list)
    failed_slots: list[SlotRecord] = field(default_factory=list)
    invalid: dict[str, int] = field(default_factory=dict)
    quality: quality_summary.QualitySummary | None = None
    #: what was compared (report/setup.py): the setup line and each arm's differences
    setup: RunSetup | None = None


