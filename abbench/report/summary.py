"""The summary under the PR table, as data: per arm, the rows that changed (each its
row key, change and mark), the rows not decided yet, and how many greedy outputs
differ. :mod:`abbench.report.markdown` puts it in words (a metric over contexts as its
range, rows by their labels); report.json carries it whole."""

from __future__ import annotations

from dataclasses import dataclass

from abbench.model.rows import RowKey
from abbench.report.tablemodel import Table


@dataclass(frozen=True)
class Change:
    """One changed row of the table: its key, the change against the baseline and its
    mark (▲ better, ▼ worse)."""

    row: RowKey
    change: float
    mark: str


@dataclass(frozen=True)
class Greedy:
    """How many of a quality set's greedy outputs differ from the baseline's."""

    set: str
    differ: int
    compared: int


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    label: str
    changed: tuple[Change, ...]
    #: the rows whose verdict is still open (inconclusive, too few rounds)
    undecided: tuple[RowKey, ...]
    greedy: tuple[Greedy, ...]


def summary_of(table: Table) -> list[ArmSummary]:
    """Per arm but the baseline: its changed rows in table order, the rows not
    decided yet, and its greedy-output differences."""
    out = []
    for arm in table.arms:
        if arm == table.baseline:
            continue
        changed, undecided = [], []
        for r in table.rows:
            c = r.cells.get(arm)
            comp = c.comparison if c is not None else None
            if comp is not None and comp.verdict in ("inconclusive", "too_few_rounds"):
                undecided.append(r.key)
            if comp is None or comp.verdict != "changed" or comp.change is None:
                continue
            changed.append(Change(r.key, comp.change, comp.mark))
        q = table.quality
        greedy = [Greedy(s.name, len(sc.diffs), sc.compared)
                  for s in (q.sets if q is not None else []) for sc in s.comparisons
                  if sc.arm == arm]
        out.append(ArmSummary(arm, table.labels.get(arm, arm), tuple(changed),
                              tuple(undecided), tuple(greedy)))
    return out
