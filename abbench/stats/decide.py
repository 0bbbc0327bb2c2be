"""How many rounds in all would decide an undecided cell, with a stated probability.

The answer is a predictive probability, not a point solve: the true sd is drawn from the
sampling distribution of the sd seen (sigma^2 = s^2 df / chi^2_df, at :data:`SD_POINTS`
quantiles; the sd pooled over the cells of one metric in a family, which share the
server's noise, with their degrees of freedom: :func:`abbench.stats.families.adjust`),
each draw weighed by 1 / the chance that a cell of that sd would still be undecided
after today's rounds (:func:`_undecided`): only an undecided cell asks, and the sd's
likelihood given that it is undecided is its sampling density over that chance; without
it a small sd, which decides most cells at once, is undercounted and k errs long
(docs/simulation.md, the sixth pass). The true effect is drawn from its distribution
given the rounds so far: a flat prior, or, where like cells (one metric in one family)
show how far true effects spread around 0, a normal prior of that spread (empirical
Bayes; 0, which pulls the estimate all the way to 0, unless their estimates spread more
than noise would make them at 5%, not from one cell alone, or one of them changed:
:attr:`abbench.stats.families.Pool.spread`), which pulls an estimate that is mostly
noise back towards 0. The sd the N rounds will show is the pool of today's rounds and
sigma. A cell is decided at N when its estimate clears the band by the t half-width at
the family's adjusted level ("changed"; one-sided at ``alpha_changed``, times
:func:`level_share` at 2 rounds) or its 1 - 2
alpha interval lies inside the band ("within noise"). The rounds are the smallest N
where the chance of either reaches ``prob`` (80% by default).

``bimodal``: server lives sit at two levels; the sd of the rounds is then known from
the levels (:func:`bimodal_gap`), and the model's sd is used without drawing it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import special as sc
from scipy import stats as sps

#: the probability "about k more rounds" is stated at
PROB = 0.8
#: quantiles of the sd's sampling distribution averaged over
SD_POINTS = 32
#: no answer beyond this many rounds in all
MAX_N = 10000
#: the share of its level a timed cell is tested at, by its rounds (:func:`level_share`)
FEW_ROUNDS_SHARE = {2: 0.5}
#: the stratified draws of (mean, sd) at n rounds that say how likely a cell is to be
#: still undecided there, for each sd drawn (:func:`_undecided`)
SELECT_POINTS = 512


def level_share(n: int) -> float:
    """The share of its level a timed cell of ``n`` rounds is tested at: half at 2
    rounds, all from 3. Two rounds are two server lives of each arm; where lives sit on
    two levels (docs/noise.md measures 9% apart on the H200), the baseline's two on one
    level and the arm's two on the other read as a change in every round, which no test
    can tell from a real one: with 1 in 8 such arm pairs, the whole level would let A/A
    tables say "changed" in about 6% (docs/simulation.md §3)."""
    return FEW_ROUNDS_SHARE.get(n, 1.0)


@functools.lru_cache(maxsize=256)
def _sigma_scale(df: int) -> np.ndarray:
    """sqrt(df / chi^2_df) at the midpoint quantiles: sigma / s."""
    q = (np.arange(SD_POINTS) + 0.5) / SD_POINTS
    out = np.sqrt(df / sps.chi2.ppf(q, df))[:, None]
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=256)
def _coarse(n: int) -> np.ndarray:
    """The N first tried: every one of the next 16, then a geometric grid to MAX_N."""
    near = np.arange(n + 1, n + 17)
    far = np.geomspace(n + 17, max(MAX_N, n + 18), 48).astype(int)
    out = np.unique(np.concatenate([near, far])).astype(float)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=1)
def _select_draws() -> tuple[np.ndarray, np.ndarray]:
    """Standard normal quantiles and uniforms at midpoints, paired by one fixed
    permutation (a Latin hypercube: the same for every call, so a k is reproducible)."""
    u = (np.arange(SELECT_POINTS) + 0.5) / SELECT_POINTS
    z = sc.ndtri(u)
    v = u[np.random.default_rng(0).permutation(SELECT_POINTS)]
    z.flags.writeable = False
    v.flags.writeable = False
    return z, v


@functools.lru_cache(maxsize=256)
def _sd_ratio(df: int) -> np.ndarray:
    """s / sigma at the draws' uniforms: sqrt(chi^2_df / df)."""
    out = np.sqrt(2 * sc.gammaincinv(df / 2, _select_draws()[1]) / df)[None, :]
    out.flags.writeable = False
    return out


def _undecided(sigma: np.ndarray, theta: np.ndarray, n: int, df: int, lo: float, hi: float,
               alpha_changed: float, alpha_within: float) -> np.ndarray:
    """For each sd ``sigma`` (a column), the chance that a cell whose true effect is
    ``theta`` is still undecided after n rounds, its sd known to ``df`` degrees of
    freedom: the test of :func:`decide_probability` at n."""
    z, _v = _select_draws()
    m = theta + sigma / math.sqrt(n) * z[None, :]
    se = sigma * _sd_ratio(df) / math.sqrt(n)
    h_c = sc.stdtrit(df, 1 - alpha_changed * level_share(n)) * se
    h_w = sc.stdtrit(df, 1 - alpha_within) * se
    decided = (m - hi > h_c) | (lo - m > h_c) | ((lo < m - h_w) & (m + h_w < hi))
    return np.asarray(1.0 - decided.mean(axis=1, keepdims=True))


def decide_probability(mean: float, sd: float, n: int, lo: float, hi: float,
                       big_n: np.ndarray, *, alpha_changed: float, alpha_within: float,
                       sd_known: bool = False, df: int | None = None,
                       spread: float | None = None, df_gain: float = 1.0) -> np.ndarray:
    """The chance the cell is decided after N rounds in all, for each N of ``big_n``
    (``df``: the sd's degrees of freedom, n - 1 unless pooled; ``spread``: the variance
    of the true effects around 0 among like cells, None for a flat prior; ``df_gain``:
    the verdict's degrees of freedom over the rounds' own, N - 1, where it tests the
    sd moderated by like cells: :func:`abbench.stats.cells.compare_cells`)."""
    d = df or n - 1
    sigma = sd * (np.ones((1, 1)) if sd_known else _sigma_scale(d))
    big = big_n[None, :]
    se2 = sigma**2 / n
    w = np.ones_like(se2) if spread is None else spread / (spread + se2)
    weight = np.full_like(sigma, 1.0 / sigma.shape[0])
    if not sd_known:  # only an undecided cell asks: weigh each sd by 1 / P(undecided)
        weight = 1.0 / np.maximum(_undecided(sigma, w * mean, n, d, lo, hi, alpha_changed,
                                             alpha_within), 1.0 / SELECT_POINTS)
        weight /= weight.sum()
    centre = (n + (big - n) * w) * mean / big  # the mean of the N rounds, expected
    tau = ((big - n) / big) * np.sqrt(w * se2 + sigma**2 / (big - n))
    s_n = np.sqrt(((n - 1) * sd**2 + (big - n) * sigma**2) / (big - 1)) / np.sqrt(big)
    h_c = sc.stdtrit((big - 1) * df_gain, 1 - alpha_changed) * s_n
    h_w = sc.stdtrit((big - 1) * df_gain, 1 - alpha_within) * s_n
    up = sc.ndtr((centre - hi - h_c) / tau)
    down = sc.ndtr((lo - h_c - centre) / tau)
    inside = np.maximum(sc.ndtr((hi - h_w - centre) / tau)
                        - sc.ndtr((lo + h_w - centre) / tau), 0.0)
    return np.asarray(((up + down + inside) * weight).sum(axis=0))


def rounds_to_decide(mean: float, sd: float, n: int, lo: float, hi: float, *,
                     alpha_changed: float, alpha_within: float, prob: float = PROB,
                     sd_known: bool = False, df: int | None = None,
                     spread: float | None = None, df_gain: float = 1.0) -> int | None:
    """The smallest N (rounds in all, > n) at which the cell is decided with chance
    ``prob`` (see the module's text): a coarse grid, then every N of the first gap that
    crosses, in one call (the sds' weights are worked out once per call); None when no
    N up to :data:`MAX_N` would, or there is no sd yet (under 2 rounds)."""
    if n < 2 or not (math.isfinite(sd) and math.isfinite(mean)) or sd <= 0:
        return None
    how: dict[str, Any] = dict(alpha_changed=alpha_changed, alpha_within=alpha_within,
                               sd_known=sd_known, df=df, spread=spread, df_gain=df_gain)
    grid = _coarse(n)
    ok = np.flatnonzero(decide_probability(mean, sd, n, lo, hi, grid, **how) >= prob)
    if ok.size == 0:
        return None
    i = int(ok[0])
    if i == 0:
        return int(grid[0])
    gap = np.arange(grid[i - 1] + 1, grid[i] + 1)  # grid[i - 1] falls short, grid[i] not
    return int(gap[np.argmax(decide_probability(mean, sd, n, lo, hi, gap, **how) >= prob)])


def two_levels(values: np.ndarray, *, ratio: float = 4.0, floor: float = 0.01
               ) -> tuple[float, float, float] | None:
    """(gap, share above, cut) when ``values`` (log scale) sit at two levels: the widest
    gap between sorted values, with at least two on each side, is over ``ratio`` times
    the pooled sd within the two groups and over ``floor``; ``cut`` lies in that gap.
    None below 6 values or otherwise."""
    x = np.sort(np.asarray(values, dtype=float))
    if x.size < 6 or not np.all(np.isfinite(x)):
        return None
    gaps = np.diff(x)[1:-1]  # splits with at least two values on each side
    k = int(np.argmax(gaps)) + 2  # split before x[k]
    low, high = x[:k], x[k:]
    within = math.sqrt((low.var(ddof=1) * (low.size - 1) + high.var(ddof=1) * (high.size - 1))
                       / (x.size - 2))
    if x[k] - x[k - 1] <= max(ratio * within, floor):
        return None
    return float(high.mean() - low.mean()), high.size / x.size, float(x[k - 1] + x[k]) / 2


def bimodal_gap(values: np.ndarray, *, ratio: float = 4.0, floor: float = 0.01
                ) -> tuple[float, float] | None:
    """(gap, share above) when an arm's log-values sit at two levels (:func:`two_levels`)."""
    got = two_levels(values, ratio=ratio, floor=floor)
    return None if got is None else got[:2]


#: below this many rounds an arm's own values cannot show two levels (:func:`bimodal_gap`
#: needs 6); the table's server lives, every arm's, are looked at instead
#: (:func:`lives_gap`)
LIVES_BELOW = 6
#: the table's lives are read from this many rounds: two lives an arm are too few (under
#: normal noise 6-7% of 3-arm tables of 2 rounds read two levels; 2 rounds are tested
#: at half the level instead, :func:`level_share`)
LIVES_FROM = 3
#: a gap between a table's lives must be this many times the sd within the two levels:
#: stricter than an arm's own rounds' 4, since a table has several metrics, each a
#: chance of a false two levels (docs/simulation.md, the eleventh pass)
LIVES_RATIO = 6.0
#: the fewest lives a table's two levels are read from: with 6 or 8 (one arm against the
#: baseline at 3 or 4 rounds) normal noise reads two levels in 5-9% and 2-3% of
#: H200-shaped tables, and such a table gains nothing: its pattern (the baseline's
#: lives on one level, the arm's on the other) has no third arm to show it
LIVES_MIN = 9


def reads_lives(n: int) -> bool:
    """Whether a timed cell of ``n`` rounds is tested against the table's lives
    (:func:`lives_gap`): from :data:`LIVES_FROM` rounds, below :data:`LIVES_BELOW`."""
    return LIVES_FROM <= n < LIVES_BELOW


def lives_gap(lives: Mapping[tuple[str, int], float]) -> float | None:
    """The gap between two levels of a table's server lives where one arm has lives on
    both: ``lives``, (arm, round) -> the life's level (log scale: the mean over a
    metric's rows of each row's value less that row's mean over all lives). An arm
    whose lives sit on both sides of a wide gap, the others' on one side or the other,
    is the machine's noise, not a build's change (which moves all of an arm's lives);
    a change moves an arm's lives together, and no arm straddles. None otherwise, and
    below :data:`LIVES_MIN` lives."""
    if len(lives) < LIVES_MIN:
        return None
    got = two_levels(np.fromiter(lives.values(), dtype=float), ratio=LIVES_RATIO)
    if got is None:
        return None
    gap, _share, cut = got
    sides: dict[str, set[bool]] = {}
    for (arm, _r), level in lives.items():
        sides.setdefault(arm, set()).add(level > cut)
    return gap if any(len(s) == 2 for s in sides.values()) else None
