"""Comparisons of an arm against the baseline, paired by round.

Pure functions: arrays in, result objects out; rendering helpers are separate.
(First version: delta of the means and a range-overlap check. The verdicts
issue replaces this with paired intervals and three-state verdicts.)
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from abbench.report import Row, Table


@dataclass(frozen=True)
class Comparison:
    n: int
    delta_pct: float
    overlap: bool


def compare(base: dict[int, float], arm: dict[int, float]) -> Comparison | None:
    if not base or not arm:
        return None
    b, a = list(base.values()), list(arm.values())
    if statistics.fmean(b) == 0:  # a count that is 0 in the baseline: no percent change
        return None
    delta = (statistics.fmean(a) / statistics.fmean(b) - 1) * 100
    overlap = min(a) <= max(b) and min(b) <= max(a)
    paired = len(set(base) & set(arm))
    return Comparison(n=paired, delta_pct=delta, overlap=overlap)


def compare_rows(rows: list[Row], baseline: str, *, noise_band: float, alpha: float) -> None:
    for row in rows:
        base = row.cells.get(baseline)
        if base is None:
            continue
        b = dict(zip(base.rounds, base.values, strict=True))
        for arm, cell in row.cells.items():
            if arm != baseline:
                cell.comparison = compare(b, dict(zip(cell.rounds, cell.values, strict=True)))


def render_comparison(c: Comparison) -> str:
    mark = " ≈" if c.overlap else ""
    return f"({c.delta_pct:+.1f}%){mark}"


def legend_lines() -> list[str]:
    return ["Cells: per-round values (a / b) or their range (min-max); (±x%) is the change of "
            "the mean against the baseline; ≈ marks ranges that overlap (inside the noise)."]


def details_lines(table: Table) -> list[str]:
    del table
    return []


__all__ = [
    "Any",
    "Comparison",
    "compare",
    "compare_rows",
    "details_lines",
    "legend_lines",
    "render_comparison",
]
