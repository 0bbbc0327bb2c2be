"""One door from a table's cells to their verdicts: each cell compared by its metric's
kind (:mod:`abbench.stats.kinds`), then adjusted for multiplicity in its family."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from abbench.stats.blocks import compare_blocks
from abbench.stats.counts import compare_counts
from abbench.stats.decide import lives_gap, reads_lives
from abbench.stats.families import adjust, family_pools
from abbench.stats.kinds import family, kind
from abbench.stats.paired import Comparison, compare


@dataclass(frozen=True)
class CellInput:
    """What one cell is compared on: its metric, the baseline's and the arm's values by
    round, and how (see :func:`compare_cell`)."""

    metric: str
    base: Mapping[int, float]
    arm: Mapping[int, float]
    direction: str
    alpha: float
    noise_band: float
    base_name: str
    arm_name: str
    hosts: Mapping[int, str] | None = None
    totals: tuple[Mapping[int, float], Mapping[int, float]] | None = None
    #: the table shows the cell's row
    shown: bool = True

    def ratios(self) -> dict[int, float]:
        """ln(arm / baseline) by round, where both are positive."""
        return {r: math.log(self.arm[r] / self.base[r]) for r in self.base
                if r in self.arm and self.base[r] > 0 and self.arm[r] > 0}


#: a cell's sd is moderated in its verdict only in a pool of at least this many cells:
#: below three, whether their sds differ more than chance cannot be told
#: (:func:`abbench.stats.families.pooled_sd`), and a quiet row would lend its sd to a
#: noisy one
MODERATE_FROM = 3


def compare_cells(cells: Sequence[CellInput]) -> list[Comparison | None]:
    """A table's cells to their verdicts, the one door: each compared by its metric's
    kind (:func:`compare_cell`); each timed cell paired by round then tested again with
    its sd moderated towards those of its family's cells of its metric (Smyth's
    moderated t: :meth:`abbench.stats.families.Pool.moderate`, with the pool's effective
    degrees of freedom from the cells' correlation over the rounds) where that knows
    more than its own rounds and the pool has :data:`MODERATE_FROM` cells, and at the
    rounds :func:`~abbench.stats.decide.reads_lives` takes with at least the two-level sd
    where the table's server lives sit at two levels (:func:`table_lives`,
    :func:`~abbench.stats.decide.lives_gap`); then the families' multiplicity
    (:func:`abbench.stats.families.adjust`). None for a cell with nothing to compare."""
    first = [compare_cell(c.metric, c.base, c.arm, direction=c.direction, alpha=c.alpha,
                          noise_band=c.noise_band, base_name=c.base_name,
                          arm_name=c.arm_name, hosts=c.hosts, totals=c.totals)
             for c in cells]
    idx = [k for k, c in enumerate(first) if c is not None]
    comps = [c for c in first if c is not None]
    if not comps:
        return first
    fams = [family(cells[k].metric, cells[k].shown) for k in idx]
    mets = [cells[k].metric for k in idx]
    pools = family_pools(comps, fams, mets, [cells[k].ratios() for k in idx])
    timed: dict[tuple[str, str], list[int]] = {}
    for j, k in enumerate(idx):
        if comps[j].kind == "sampled" and not cells[k].hosts:
            timed.setdefault((fams[j], mets[j]), []).append(j)
    gaps = {key: lives_gap(table_lives([cells[idx[j]] for j in js]))
            for key, js in timed.items() if any(reads_lives(comps[j].n) for j in js)}
    for j, (k, c) in enumerate(zip(idx, comps, strict=True)):
        ci, pool, gap = cells[k], pools[fams[j], mets[j]], gaps.get((fams[j], mets[j]))
        if ci.hosts or c.kind != "sampled" or c.exact or c.sd_log is None or c.n < 2:
            continue
        pooled = None
        if pool is not None and pool.cells >= MODERATE_FROM and c.sd_log > 0:
            sd, df = pool.moderate(c.sd_log, c.n - 1)
            pooled = (sd, df) if df > c.n - 1 + 1e-9 else None
        if pooled is not None or (gap is not None and reads_lives(c.n)):
            comps[j] = compare(ci.base, ci.arm, direction=ci.direction, alpha=ci.alpha,
                               noise_band=ci.noise_band, base_name=ci.base_name,
                               arm_name=ci.arm_name, kind=c.kind, pooled=pooled,
                               lives=gap) or c
    out = list(first)
    for k, c in zip(idx, adjust(comps, fams, mets, pools), strict=True):
        out[k] = c
    return out


def table_lives(cells: Sequence[CellInput]) -> dict[tuple[str, int], float]:
    """Each server life's level over the rows of ``cells`` (one metric's): (arm, round)
    -> the mean over the rows of ln(value) less that row's mean over the lives every row
    has. The baseline's rounds name a row (its cells of each arm share them)."""
    rows: dict[tuple[tuple[int, float], ...], dict[tuple[str, int], float]] = {}
    for c in cells:
        row = rows.setdefault(tuple(sorted(c.base.items())), {})
        for name, vals in ((c.base_name, c.base), (c.arm_name, c.arm)):
            row.update({(name, r): math.log(v) for r, v in vals.items()
                        if v > 0 and math.isfinite(v)})
    if not rows:
        return {}
    common = set.intersection(*(set(u) for u in rows.values()))
    out = dict.fromkeys(common, 0.0)
    for row in rows.values():
        mid = math.fsum(row[u] for u in common) / max(len(common), 1)
        for u in common:
            out[u] += (row[u] - mid) / len(rows)
    return out


def compare_cell(metric: str, base: Mapping[int, float], arm: Mapping[int, float], *,
                 direction: str, alpha: float, noise_band: float, base_name: str,
                 arm_name: str, hosts: Mapping[int, str] | None = None,
                 totals: tuple[Mapping[int, float], Mapping[int, float]] | None = None
                 ) -> Comparison | None:
    """One cell against the baseline, alone: counts tested as counts (``totals``: the
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
