"""Verdicts on counted metrics: passes out of items, good requests out of requests,
failed requests. A count moves in whole steps, so two rounds can agree by chance and a
t on rounds would read that as no noise at all; the counts themselves are tested.

- with a known total per round (quality: passes of the set's items; goodput: good
  requests of the measured ones), the pooled counts of each arm in a 2 x 2 table:
  Fisher's exact test for "no change", and the ratio of the two shares with its
  1 - 2 alpha Katz interval on the log scale (half a count added to every cell, so
  that all-pass rounds give an interval, not a point);
- without one (failed requests), the rates as Poisson counts over the same rounds:
  the arm's share of all counts against 1/2 (the conditional binomial test), with its
  Clopper-Pearson interval turned into a ratio.

"changed" needs p < alpha (after Benjamini-Hochberg in the cell's family) and the
interval wholly outside the band; "within noise" the interval wholly inside. The
rounds an undecided cell needs come with the table's adjustment (:func:`families.adjust`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from functools import reduce

from abbench.stats.paired import Comparison, Verdict, band_edges

#: the largest number of requests a goodput share is read as a fraction of
MAX_DENOMINATOR = 100000


def share_total(shares: list[float]) -> int | None:
    """The fewest requests every share can be a count of: the least common multiple of
    their reduced denominators (a lower bound of the real count, so the test is never
    more confident than the data); None when a share is no such fraction."""
    dens = []
    for v in shares:
        f = Fraction(v).limit_denominator(MAX_DENOMINATOR)
        if abs(float(f) - v) > 1e-9 or not 0 <= v <= 1:
            return None
        dens.append(f.denominator)
    total = reduce(math.lcm, dens, 1)
    return total if total <= MAX_DENOMINATOR else None


def compare_counts(base: Mapping[int, float], arm: Mapping[int, float], *,
                   base_totals: Mapping[int, float] | None = None,
                   arm_totals: Mapping[int, float] | None = None, shares: bool = False,
                   direction: str = "higher", alpha: float = 0.05, noise_band: float = 0.01,
                   ) -> Comparison | None:
    """The comparison of one counted cell over the rounds both arms ran. ``shares``:
    the values are shares of a count (goodput), their totals :func:`share_total`;
    else counts, out of ``*_totals`` per round when given (quality)."""
    from scipy import stats as sps  # scipy is heavy: loaded when a test runs

    rounds = sorted(set(base) & set(arm))
    n = len(rounds)
    if n == 0:
        return None
    total: int | None = None
    if shares:
        total = share_total([base[r] for r in rounds] + [arm[r] for r in rounds])
        if total is None:
            return None
        bt = at = float(total * n)
        bx = float(sum(round(base[r] * total) for r in rounds))
        ax = float(sum(round(arm[r] * total) for r in rounds))
        how = f"Fisher's exact test on pooled counts (>= {total} requests a round)"
    elif base_totals is not None and arm_totals is not None:
        if any(r not in base_totals or r not in arm_totals for r in rounds):
            return None
        bx, ax = sum(base[r] for r in rounds), sum(arm[r] for r in rounds)
        bt, at = sum(base_totals[r] for r in rounds), sum(arm_totals[r] for r in rounds)
        how = "Fisher's exact test on pooled counts"
    else:
        bx, ax = sum(base[r] for r in rounds), sum(arm[r] for r in rounds)
        bt = at = 0.0
        how = "exact conditional binomial test on Poisson counts"
    if bx <= 0 or ax <= 0 or (bt and (bx > bt or ax > at)):
        return None  # no ratio (a count of 0), or counts beyond their totals
    z = float(sps.norm.ppf(1 - alpha))
    if bt:
        p = float(sps.fisher_exact([[round(ax), round(at - ax)],
                                    [round(bx), round(bt - bx)]]).pvalue)
        est = math.log((ax / at) / (bx / bt))
        ca, cb = ax + 0.5, bx + 0.5
        se = math.sqrt(1 / ca - 1 / (at + 1) + 1 / cb - 1 / (bt + 1))
        lo, hi = est - z * se, est + z * se
    else:
        k = round(ax + bx)
        p = float(sps.binomtest(round(ax), k, 0.5).pvalue)
        est = math.log(ax / bx)
        ci = sps.binomtest(round(ax), k, 0.5).proportion_ci(1 - 2 * alpha)
        lo = math.log(ci.low / (1 - ci.low)) if ci.low > 0 else -math.inf
        hi = math.log(ci.high / (1 - ci.high)) if ci.high < 1 else math.inf
        se = (hi - lo) / (2 * z) if math.isfinite(hi - lo) else math.inf
    lo_edge, hi_edge = band_edges(noise_band)
    verdict: Verdict
    if n < 2:
        verdict = "too_few_rounds"
    elif p < alpha and (lo > hi_edge or hi < lo_edge):
        verdict = "changed"
    elif lo >= lo_edge and hi <= hi_edge:
        verdict = "within_noise"
    else:
        verdict = "inconclusive"
    c = Comparison(
        n=n, verdict=verdict, change=math.expm1(est), lo=math.expm1(lo), hi=math.expm1(hi),
        half_width=(hi - lo) / 2, p=p, p_raw=p, test=how, alpha=alpha, noise_band=noise_band,
        better=(est > 0) == (direction == "higher") if verdict == "changed" else None,
        sd_log=se * math.sqrt(n) if math.isfinite(se) else None, t_p=p, t_lo=None, t_hi=None,
        wilcoxon_p=None, hl=None, hl_lo=None, hl_hi=None, exact=False, rounds_needed=None,
        comparisons=1, outliers={}, cv={}, drift={}, warnings=(), kind="counted")
    return c
