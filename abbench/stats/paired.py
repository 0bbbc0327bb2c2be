"""Verdicts that can be trusted: an arm against the baseline, paired by round.

Pure functions: arrays in, result objects out; :mod:`abbench.report.verdicts`
renders them.

For each round both arms ran, d = ln(arm / baseline) (reps already averaged
within the round). The change is exp(mean d) - 1 with its paired t interval at
1 - 2 alpha (90% at alpha 5%), valid from two rounds. Verdicts:

- ``changed``: the p of "beyond the band" (the chance, were the effect at the
  band's edge, of an estimate at least this far out on either side) is below alpha
  (half of it at 2 rounds: :func:`~.decide.level_share`)
  and survives Benjamini-Hochberg over the table's cells; the interval then lies
  wholly outside the noise band;
- ``within_noise``: the whole interval lies inside the band (two one-sided tests
  at alpha);
- ``inconclusive``: neither; ``rounds_needed`` says about how many rounds would decide;
- ``too_few_rounds``: one round, no interval.

Rounds that agree exactly (memory in MiB, token counts) decide at n = 2. The
Wilcoxon signed-rank test with the Hodges–Lehmann estimate is the distribution-free
cross-check: it can hold back a verdict that rests on outlier rounds, never veto
one that both estimates support. benchmarks/simulate.py checks every rule
(docs/simulation.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats as sps

from abbench.stats.decide import bimodal_gap, level_share, reads_lives
from abbench.stats.kinds import Kind

Verdict = Literal["changed", "within_noise", "inconclusive", "too_few_rounds"]
VERDICTS: tuple[Verdict, ...] = ("changed", "within_noise", "inconclusive", "too_few_rounds")

#: modified z-score above which a value is flagged as an outlier (Iglewicz–Hoaglin)
OUTLIER_Z = 3.5
#: coefficient of variation within an arm above which the report warns (pyperf)
CV_WARN = 0.10

# ------------------------------------------------------------------ pure statistics


def log_ratios(base: Mapping[int, float], arm: Mapping[int, float]) -> tuple[list[int], np.ndarray]:
    """Rounds both arms have, and d = ln(arm / base) for each."""
    rounds = sorted(set(base) & set(arm))
    with np.errstate(divide="ignore", invalid="ignore"):  # a 0 (goodput of none): no ratio
        return rounds, np.log(np.array([arm[r] for r in rounds], dtype=float)
                              / np.array([base[r] for r in rounds], dtype=float))


@dataclass(frozen=True)
class TResult:
    mean: float
    sd: float
    lo: float
    hi: float
    p: float


def t_interval(d: Sequence[float] | np.ndarray, alpha: float = 0.05,
               pooled: tuple[float, float] | None = None) -> TResult:
    """One-sample t on the log-ratios (= paired t on the logs): mean, sd, interval, p.
    ``pooled``: an sd and its degrees of freedom to use instead of the rounds' own (n -
    1): the cell's sd moderated towards its family's (:func:`~.families.Pool.moderate`)."""
    x = np.asarray(d, dtype=float)
    n = x.size
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if n > 1 else math.nan
    if n < 2:
        return TResult(mean, sd, -math.inf, math.inf, 1.0)
    df: float = n - 1
    if pooled is not None:
        sd, df = pooled
    if sd == 0.0:
        return TResult(mean, 0.0, mean, mean, 1.0 if mean == 0 else 0.0)
    se = sd / math.sqrt(n)
    half = float(sps.t.ppf(1 - alpha / 2, df)) * se
    p = float(2 * sps.t.sf(abs(mean) / se, df))  # = scipy.stats.ttest_1samp(x, 0)
    return TResult(mean, sd, mean - half, mean + half, p)


@functools.lru_cache(maxsize=256)
def signed_rank_null(n: int) -> np.ndarray:
    """P(T+ = k), k = 0 .. n(n+1)/2, for the exact signed-rank statistic without ties."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for r in range(1, n + 1):
        shifted = np.zeros_like(counts)
        shifted[r:] = counts[:-r]
        counts = counts + shifted
    out = counts / 2.0**n
    out.flags.writeable = False
    return out


def smallest_p(n: int) -> float:
    """The smallest two-sided p the exact signed-rank test can give with n pairs."""
    return 1.0 if n < 1 else min(1.0, 2.0 ** (1 - n))


@dataclass(frozen=True)
class WilcoxonResult:
    hl: float
    lo: float
    hi: float
    p: float


def wilcoxon_hl(d: Sequence[float] | np.ndarray, alpha: float = 0.05) -> WilcoxonResult:
    """Wilcoxon signed-rank p (scipy) with the Hodges–Lehmann estimate and its exact
    distribution-free interval from the Walsh averages (infinite when n is too small)."""
    x = np.asarray(d, dtype=float)
    n = x.size
    i, j = np.triu_indices(n)
    walsh = np.sort((x[i] + x[j]) / 2)
    hl = float(np.median(walsh))
    if n < 1 or np.all(x == 0):
        return WilcoxonResult(hl, -math.inf, math.inf, 1.0)
    cdf = np.cumsum(signed_rank_null(n))
    # c = the largest k with P(T+ <= k) <= alpha/2; interval [W(c+1), W(M-c)] (1-based)
    ok = np.nonzero(cdf <= alpha / 2 + 1e-12)[0]
    if ok.size == 0:
        lo, hi = -math.inf, math.inf
    else:
        c = int(ok[-1])
        lo, hi = float(walsh[c]), float(walsh[walsh.size - 1 - c])
    return WilcoxonResult(hl, lo, hi, wilcoxon_p(x))


def wilcoxon_p(x: np.ndarray) -> float:
    """Two-sided signed-rank p: exact from :func:`signed_rank_null` when there are no
    zeros or tied |d| (the same number as ``scipy.stats.wilcoxon(x, method="exact")``,
    a fifth of the cost), else scipy's own (normal approximation with tie correction)."""
    n = x.size
    if n < 2:
        return 1.0
    a = np.abs(x)
    if n > 50 or np.any(a == 0) or np.unique(a).size < n:
        return float(sps.wilcoxon(x).pvalue)
    ranks = np.empty(n)
    ranks[np.argsort(a)] = np.arange(1, n + 1)
    t_plus = int(ranks[x > 0].sum())
    null = signed_rank_null(n)
    return float(min(1.0, 2 * min(null[: t_plus + 1].sum(), null[t_plus:].sum())))


def modified_z(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """0.6745 (x - median) / MAD; zeros when the MAD is zero."""
    a = np.asarray(x, dtype=float)
    if a.size == 0:
        return a
    med = np.median(a)
    mad = np.median(np.abs(a - med))
    if mad == 0:
        return np.zeros_like(a)
    return 0.6745 * (a - med) / mad


def outlier_rounds(rounds: Sequence[int], values: Sequence[float], *, floor: float = 0.0,
                   relative: bool = False) -> list[int]:
    """Rounds whose value's modified z-score passes :data:`OUTLIER_Z` (flagged, kept);
    none below 5 values, where a median and MAD say little.

    ``floor``: a value must also lie farther than this from the median (a fraction of
    the median with ``relative``): when rounds agree to 0.05%, a MAD-based z calls a
    0.1% wobble an outlier, which says nothing about the comparison.
    """
    if len(values) < 5:
        return []
    a = np.asarray(values, dtype=float)
    z = modified_z(a)
    dev = np.abs(a - np.median(a))
    if relative and np.median(a) != 0:
        dev = dev / abs(np.median(a))
    return [r for r, zi, dv in zip(rounds, z, dev, strict=True)
            if abs(zi) > OUTLIER_Z and dv > floor]


def cv(values: Sequence[float]) -> float:
    a = np.asarray(values, dtype=float)
    if a.size < 2 or a.mean() == 0:
        return 0.0
    return float(a.std(ddof=1) / abs(a.mean()))


def drift(rounds: Sequence[int], values: Sequence[float]) -> float | None:
    """Change across the run of a least-squares line of ln(value) against the round
    index, as a fraction (exp(slope x span) - 1); None below 3 rounds."""
    if len(values) < 3 or min(values) <= 0 or len(set(rounds)) < 2:
        return None
    slope = np.polyfit(np.asarray(rounds, float), np.log(np.asarray(values, float)), 1)[0]
    return math.expm1(float(slope) * (max(rounds) - min(rounds)))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda k: pvalues[k])
    out = [0.0] * m
    running = 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[k]))
        out[k] = running
    return out


def rounds_needed(sigma: float, delta: float, *, alpha: float = 0.05, power: float = 0.8,
                  max_n: int = 100000) -> int | None:
    """Smallest n with (t_{1-alpha/2,n-1} + t_{power,n-1}) sigma / sqrt(n) <= delta: the
    t-corrected form of n = ((z_{1-alpha/2} + z_power) sigma / delta)^2 (2.8 at 5%/80%)."""
    if delta <= 0:
        return None
    if sigma <= 0:
        return 2
    n = 2
    while n <= max_n:
        k = sps.t.ppf(1 - alpha / 2, n - 1) + sps.t.ppf(power, n - 1)
        if k * sigma / math.sqrt(n) <= delta:
            return n
        n += 1
    return None


# ------------------------------------------------------------------ comparison


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (step-up), in the input order: calling
    "changed" where the adjusted p < alpha keeps the expected share of false
    "changed" cells at most alpha, and is the family-wise rule when every cell is an
    A/A (all nulls true)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda k: pvalues[k], reverse=True)
    out = [0.0] * m
    running = 1.0
    for rank, k in enumerate(order):
        running = min(running, pvalues[k] * m / (m - rank))
        out[k] = min(1.0, running)
    return out


def band_edges(noise_band: float) -> tuple[float, float]:
    """The band on the log scale, symmetric in percent: (ln(1 - b), ln(1 + b)), so that
    -1.0% and +1.0% both sit on its edge."""
    return math.log1p(-noise_band), math.log1p(noise_band)


def p_beyond_band_se(mean: float, se: float, df: float, band: float,
                     lo: float | None = None) -> float:
    """The p of "the effect lies beyond the band": were the effect at the band's edge
    nearer the estimate, the chance of an estimate at least this far from the band's
    middle on either side, t with ``df`` degrees of freedom: t.sf((mean - hi) / se) +
    t.sf((mean - lo) / se) on the upper half (mirrored on the lower). ``band``: the
    upper edge (log scale); ``lo``: the lower edge (default -band). Below alpha it
    implies the 1 - 2 alpha interval clears the band; where the interval is wide (2 or 3
    rounds) the far tail keeps the size at alpha. Inside the band it goes on rising to 1
    at the middle, so that at the edge it is uniform on (0, 1) (with the noise known),
    and inside the band stochastically larger with a rising density: a valid p for
    every selection threshold of :func:`~.families.adjust`, not only 1/2. se 0 gives 0 beyond the
    band and 1 inside."""
    hi = band
    lo = -band if lo is None else lo
    if se == 0.0:
        return 1.0 if lo <= mean <= hi else 0.0
    if not math.isfinite(se) or df < 1:
        return 1.0
    near, far = (mean - hi, mean - lo) if 2 * mean >= lo + hi else (lo - mean, hi - mean)
    return float(min(1.0, sps.t.sf(near / se, df) + sps.t.sf(far / se, df)))


def p_beyond_band(mean: float, sd: float, n: int, band: float, lo: float | None = None) -> float:
    """:func:`p_beyond_band_se` of the mean of n log-ratios with sd ``sd`` (log scale);
    sd 0 (every round the same log-ratio) gives 0 or 1."""
    if n < 2:
        return 1.0
    return p_beyond_band_se(mean, sd / math.sqrt(n), n - 1, band, lo)


def printed_change(change: float) -> float:
    """A change as the table prints it (a percent to one decimal), as a fraction."""
    return round(change * 100, 1) / 100


@dataclass(frozen=True)
class Comparison:
    """An arm against the baseline over the rounds both ran. Changes are fractions
    (0.028 = +2.8%); ``lo``/``hi`` are the paired t interval at 1 - 2 alpha (90%)."""

    n: int
    verdict: Verdict
    change: float | None
    lo: float | None
    hi: float | None
    #: half-width of that interval on the log scale (what --until-ci compares)
    half_width: float | None
    #: p of "beyond the band" after Benjamini-Hochberg over the table's cells
    p: float | None
    #: the same before the adjustment
    p_raw: float | None
    test: str
    alpha: float
    noise_band: float
    #: "better" / "worse" by the metric's direction when changed, else None
    better: bool | None
    sd_log: float | None
    #: t test of "no change" (mean d = 0), for the details
    t_p: float | None
    t_lo: float | None
    t_hi: float | None
    wilcoxon_p: float | None
    hl: float | None
    hl_lo: float | None
    hl_hi: float | None
    #: every round gave both arms the same log-ratio (memory in MiB, token counts):
    #: the rounds agree exactly, and two of them decide
    exact: bool
    #: about how many rounds in all would decide an inconclusive cell (None: decided,
    #: or no number of rounds would at this estimate)
    rounds_needed: int | None
    comparisons: int
    outliers: dict[str, list[int]]
    cv: dict[str, float]
    drift: dict[str, float | None]
    warnings: tuple[str, ...]
    #: the metric's kind (:mod:`abbench.stats.kinds`)
    kind: Kind = "sampled"
    #: the multiplicity family the cell was adjusted in (None: exact, in none)
    family: str | None = None
    #: server lives at two levels this far apart (log scale), else None; the rounds
    #: needed then come from that two-level model
    bimodal: float | None = None
    #: the sd (log scale) and degrees of freedom the verdict used when they are the
    #: cell's own moderated towards its family's cells of its metric (more degrees of
    #: freedom than the n - 1 of ``sd_log``), else None
    moderated: tuple[float, float] | None = None

    @property
    def agrees(self) -> bool:
        """A sampled cell whose rounds all gave one log-ratio (a discrete metric): the
        sign test decides it (:func:`sign_p_band`), its ``sd_log`` 0."""
        return self.sd_log == 0 and not self.exact and self.n >= 2

    @property
    def mark(self) -> str:
        return {"changed": "▲" if self.better else "▼", "within_noise": "≈",
                "inconclusive": "?", "too_few_rounds": "?"}[self.verdict]


def _frac(x: float) -> float:
    return math.expm1(x) if math.isfinite(x) else x


def compare(base: Mapping[int, float], arm: Mapping[int, float], *, direction: str = "higher",
            alpha: float = 0.05, noise_band: float = 0.01, base_name: str = "baseline",
            arm_name: str = "arm", kind: Kind = "sampled",
            pooled: tuple[float, float] | None = None,
            lives: float | None = None) -> Comparison | None:
    """The paired comparison of one cell, before the table's multiplicity adjustment
    (:func:`~.families.adjust`, which :func:`abbench.report.table.compare_rows` applies).

    ``rounds_needed`` is left to :func:`~.families.adjust`, which knows the family's level. The
    verdict rests on the paired t interval of d = ln(arm / baseline) at 1 - 2 alpha,
    valid from two rounds: "changed" when the p of "beyond the band"
    (:func:`p_beyond_band`, the band :func:`band_edges`) is below alpha, which puts the
    interval wholly outside the band; "within noise" when the interval lies wholly
    inside; "inconclusive" otherwise. A ``deterministic`` metric whose rounds give the
    same log-ratio every time decides at n = 2 ("exact"), on the change as printed
    (:func:`printed_change`); a ``sampled`` one is never exact (rounds that agree tell
    nothing of its noise). The Wilcoxon signed-rank test with its Hodges-Lehmann
    interval (same level) is the distribution-free cross-check: where d has outlier
    rounds and that interval reaches into the band while the t test clears it, the cell
    stays inconclusive (with a warning); where both clear it, an outlier never vetoes
    the verdict. ``pooled``: the sd and degrees of freedom to test with in place of the
    rounds' own (:func:`abbench.stats.cells.compare_cells` gives the cell's sd
    moderated towards its family's); ignored where the rounds agree. ``lives``: the gap
    (log scale) between two levels the table's server lives sit at
    (:func:`~.decide.lives_gap`); at the rounds :func:`~.decide.reads_lives` takes, the
    cell is then tested with at least the two-level
    model's sd, gap / sqrt(2), on its own n - 1 degrees of freedom: a few rounds of one
    arm can all land on one level and the baseline's on the other, a change in every
    round that no spread of the rounds shows.
    """
    rounds, d = log_ratios(base, arm) if base and arm else ([], np.array([]))
    warnings: list[str] = []
    outl: dict[str, list[int]] = {}
    cvs: dict[str, float] = {}
    drifts: dict[str, float | None] = {}
    logs: dict[str, np.ndarray] = {}
    for name, vals in ((base_name, base), (arm_name, arm)):
        rs = sorted(vals)
        v = [vals[r] for r in rs]
        outl[name] = outlier_rounds(rs, v, floor=noise_band / 4, relative=True)
        cvs[name] = cv(v)
        drifts[name] = drift(rs, v)
        with np.errstate(divide="ignore", invalid="ignore"):
            logs[name] = np.log(np.asarray(v, dtype=float))
        if cvs[name] > CV_WARN:
            warnings.append(f"{name}: CV {cvs[name] * 100:.1f}% > {CV_WARN * 100:.0f}%")
    n = len(rounds)
    if n == 0:
        return None
    if not np.all(np.isfinite(d)):  # a value <= 0 (a count of 0): no ratio to compare
        return None
    outl["d"] = outlier_rounds(rounds, list(d), floor=math.log1p(noise_band) / 4)
    lo_edge, hi_edge = band_edges(noise_band)
    # rounds that agree, to the last bits of a float (log(5/4) computed from per-round
    # logs differs by 1e-17 between rounds; the sd of d is no test of it): exact for a
    # deterministic metric, a discrete one's agreement (the sign test) for a sampled one
    agree_all = n >= 2 and bool(np.all(np.abs(d - d[0]) <= 1e-12))
    exact = kind == "deterministic" and agree_all
    agree = agree_all and not exact
    pooled = None if exact or agree or n < 2 else pooled
    lived = lives if not exact and not agree and reads_lives(n) else None
    # the two-level sd, where it is above the sd the cell would be tested with
    floored = None if lived is None or lived / math.sqrt(2.0) <= (
        pooled[0] if pooled is not None else float(np.std(d, ddof=1))) \
        else (lived / math.sqrt(2.0), float(n - 1))
    pooled = floored or pooled
    if exact:
        m0 = float(d[0])
        t = TResult(m0, 0.0, m0, m0, 1.0 if m0 == 0 else 0.0)
        w = WilcoxonResult(m0, m0, m0, math.nan)  # decides nothing here: not run
    else:
        t = t_interval(d, 2 * alpha, pooled)
        w = wilcoxon_hl(d, 2 * alpha)
    if exact:
        beyond = abs(printed_change(math.expm1(t.mean))) > round(noise_band * 100, 1) / 100
        p_band = 0.0 if beyond else 1.0
    elif agree:  # a sampled metric whose rounds agree (a discrete one)
        p_band = sign_p_band(float(d[0]), n, hi_edge, lo_edge)
    elif pooled is not None:
        p_band = p_beyond_band_se(t.mean, t.sd / math.sqrt(n), pooled[1], hi_edge, lo_edge)
    else:
        p_band = p_beyond_band(t.mean, t.sd, n, hi_edge, lo_edge)
    if not exact and not agree:  # at 2 rounds, tested at half the level (level_share)
        p_band = min(1.0, p_band / level_share(n))
    test = ("exact (every round the same log-ratio)" if exact else
            "sign test (every round the same log-ratio of a sampled metric)" if agree else
            "paired t on log-ratios")
    if floored is not None and lived is not None:
        test += (f" (sd {floored[0] * 100:.2f}% of server lives at two levels "
                 f"{_frac(lived) * 100:.1f}% apart, {n - 1} df)")
    elif pooled is not None:
        test += f" (sd {pooled[0] * 100:.2f}% moderated by like cells, {pooled[1]:.1f} df)"
    if n < 2:
        verdict: Verdict = "too_few_rounds"
    elif p_band < alpha:
        verdict = "changed"
        robust_clear = w.lo > hi_edge if t.mean > 0 else w.hi < lo_edge
        if outl["d"] and not exact and math.isfinite(w.lo) and not robust_clear:
            verdict = "inconclusive"
            warnings.append("outlier rounds in d: the Hodges-Lehmann interval "
                            f"[{_frac(w.lo) * 100:+.1f}%, {_frac(w.hi) * 100:+.1f}%] reaches "
                            "into the band while the t test clears it")
    elif exact or (agree and 2.0 ** (1 - n) < alpha) \
            or (not agree and t.sd > 0 and t.lo >= lo_edge and t.hi <= hi_edge):
        verdict = "within_noise"
    else:
        verdict = "inconclusive"
    if not exact and (t.p < alpha) != (w.p < alpha) and n >= 6:
        warnings.append(f"t-test p {t.p:.3g} and Wilcoxon p {w.p:.3g} disagree at alpha "
                        f"{alpha:g}")
    change = _frac(t.mean)
    for name, dr in drifts.items():
        if dr is not None and abs(dr) > max(abs(change), noise_band):
            warnings.append(f"{name} drifted {dr * 100:+.1f}% across the run, more than the "
                            f"effect ({change * 100:+.1f}%)")
    half = (t.hi - t.lo) / 2 if math.isfinite(t.hi) else math.inf
    own = 0.0 if exact or agree else float(np.std(d, ddof=1)) if n > 1 else math.nan
    bimodal = None if exact else _bimodal(list(logs.values()))
    if lived is not None:
        bimodal = max(bimodal or 0.0, lived)
    c = Comparison(
        n=n, verdict=verdict, change=change, lo=_frac(t.lo), hi=_frac(t.hi), half_width=half,
        p=p_band, p_raw=p_band, test=test, alpha=alpha, noise_band=noise_band,
        better=(t.mean > 0) == (direction == "higher") if verdict == "changed" else None,
        sd_log=own if math.isfinite(own) else None, t_p=t.p, t_lo=_frac(t.lo),
        t_hi=_frac(t.hi), wilcoxon_p=None if exact else w.p, hl=_frac(w.hl),
        hl_lo=_frac(w.lo), hl_hi=_frac(w.hi), exact=exact, rounds_needed=None,
        comparisons=1, outliers=outl, cv=cvs, drift=drifts, warnings=tuple(warnings),
        kind=kind, bimodal=bimodal, moderated=None if floored else pooled)
    return c


def sign_p_band(d: float, n: int, hi_edge: float, lo_edge: float) -> float:
    """The sign test's p of "beyond the band" when all ``n`` rounds gave the log-ratio
    ``d`` (a discrete sampled metric, such as a capacity level): under a true change
    inside the band, each round lands beyond one edge with probability at most 1/2, so
    ``n`` rounds all beyond it have probability at most 2^-n, for either edge: 2^(1-n).
    Two rounds that agree decide nothing (p 1: a bound of 0.5 would only enlarge the
    families of :func:`~.families.adjust` for nothing); six that agree, at alpha 5%, do."""
    p = 2.0 ** (1 - n)
    return p if (d > hi_edge or d < lo_edge) and p < 0.5 else 1.0


def _bimodal(logs: Sequence[np.ndarray]) -> float | None:
    """The gap between the two levels when an arm's server lives sit at two."""
    gaps = [g for x in logs for g in [bimodal_gap(x)] if g is not None]
    return max(g for g, _share in gaps) if gaps else None


def as_json(c: Comparison) -> dict[str, Any]:
    """The comparison as plain JSON values (infinite interval ends become None)."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return {**clean(asdict(c)), "mark": c.mark}


