"""One door from a table's cells to their verdicts: each cell compared by its metric's
kind (:mod:`abbench.stats.kinds`), then adjusted for multiplicity in its family."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from abbench.stats.blocks import compare_blocks
from abbench.stats.counts import compare_counts
from abbench.stats.families import adjust
from abbench.stats.kinds import family, kind
from abbench.stats.paired import Comparison, compare


def compare_cell(metric: str, base: Mapping[int, float], arm: Mapping[int, float], *,
                 direction: str, alpha: float, noise_band: float, base_name: str,
                 arm_name: str, hosts: Mapping[int, str] | None = None,
                 totals: tuple[Mapping[int, float], Mapping[int, float]] | None = None
                 ) -> Comparison | None:
    """One cell against the baseline: counts tested as counts (``totals``: the
    baseline's and the arm's items per round, for scores), the rest paired by round
    (hosts as blocks when the rounds ran on several)."""
    k = kind(metric)
    if k == "counted":
        return compare_counts(base, arm, base_totals=totals[0] if totals else None,
                              arm_totals=totals[1] if totals else None,
                              shares=metric == "load_goodput", direction=direction,
                              alpha=alpha, noise_band=noise_band)
    if hosts:
        return compare_blocks(base, arm, hosts, direction=direction, alpha=alpha,
                              noise_band=noise_band, base_name=base_name, arm_name=arm_name,
                              kind=k)
    return compare(base, arm, direction=direction, alpha=alpha, noise_band=noise_band,
                   base_name=base_name, arm_name=arm_name, kind=k)


def adjust_cells(comps: Sequence[Comparison], metrics: Sequence[str],
                 shown: Sequence[bool]) -> list[Comparison]:
    """Benjamini-Hochberg per family (:func:`abbench.stats.kinds.family`): the table's
    shown cells that mirror no other row, and the rest; exact cells in neither. An
    undecided cell's rounds use the sd pooled over its family's cells of its metric."""
    return adjust(comps, [family(m, s) for m, s in zip(metrics, shown, strict=True)],
                  list(metrics))
