"""Change points in a metric's history, judged with each run's own rounds.

A history is a list of runs, each with its per-round values. Two parts:

- **candidates**: a piecewise-constant fit of the runs' log means by optimal
  partitioning with a penalty per segment (:func:`segments`, solved exactly with PELT
  pruning on an L2 cost, one vectorized numpy pass per run). A level lasts at least two
  runs, except the newest one, so that a step shows in the first run that has it.
- **the judge** (:func:`change_points`), the part no peer has: each step between two
  adjacent segments is a difference of two weighted means of run means, whose
  variance is the between-run variance (what successive runs of one build differ by:
  machine state, server lives) plus each run's within-run variance over its rounds.
  Both are estimated: within-run from the rounds, between-run as what the spread of
  run means holds beyond the rounds' share (a random-effects estimate, never below
  the robust spread of successive runs). The step gets the A/B table's verdict words:
  **changed** when the change is beyond the noise band at ``alpha`` (one-sided at
  the band's edge, Bonferroni over the positions a step could have taken), **within
  noise** when its ``1 - 2 alpha`` interval lies inside the band, else **not decided**.
  A step that is not called changed is merged away and its neighbours judged again,
  so every step left stands on its own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats as sps

Direction = Literal["higher", "lower"]
Verdict = Literal["changed", "within_noise", "inconclusive"]

#: median |x_i+1 - x_i| of Gaussian noise is 0.6745 * sqrt(2) sigma
_DIFF_MAD_TO_SIGMA = 1 / (0.6744897501960817 * math.sqrt(2))
_MIN_SIGMA = 1e-4  # 0.01% in log units: a floor, so that exact histories stay finite


def is_worse(change: float, direction: Direction, threshold: float = 0.0) -> bool:
    return change < -threshold if direction == "higher" else change > threshold


def noise_sigma(logs: np.ndarray) -> float:
    """A robust estimate of the noise of log values, from successive differences
    (a step moves one difference only)."""
    if len(logs) < 3:
        return _MIN_SIGMA
    d = np.abs(np.diff(logs))
    return max(float(np.median(d)) * _DIFF_MAD_TO_SIGMA, _MIN_SIGMA)


def segments(logs: Sequence[float], sigma: float | None = None) -> list[int]:
    """Start indices of the segments of the best piecewise-constant fit of ``logs``
    (PELT; penalty ``sigma^2 max(4 ln n, 9)`` per segment)."""
    x = np.asarray(logs, dtype=float)
    x = x - (x.mean() if len(x) else 0.0)  # centred: sums of squares stay exact
    n = len(x)
    if n < 2:
        return [0] * n
    sigma = noise_sigma(x) if sigma is None else sigma
    beta = sigma ** 2 * max(4 * math.log(n), 9.0)
    s1 = np.concatenate(([0.0], np.cumsum(x)))
    s2 = np.concatenate(([0.0], np.cumsum(x ** 2)))
    f = np.empty(n + 1)
    f[0] = -beta
    last = np.zeros(n + 1, dtype=np.int64)
    cands = np.array([0], dtype=np.int64)
    for t in range(1, n + 1):
        # a level lasts at least two values, except the newest (a fresh step)
        ok = cands <= t - 2 if t < n else np.ones(len(cands), dtype=bool)
        if not ok.any():
            f[t] = np.inf
            cands = np.append(cands, t)
            continue
        c = cands[ok]
        seg = s1[t] - s1[c]
        fc = f[c] + (s2[t] - s2[c]) - seg * seg / (t - c)
        k = int(fc.argmin())
        f[t] = float(fc[k]) + beta
        last[t] = c[k]
        cands = np.append(np.concatenate((c[fc <= f[t]], cands[~ok])), t)
    starts = []
    t = n
    while t > 0:
        t = int(last[t])
        starts.append(t)
    return starts[::-1]


@dataclass(frozen=True)
class Noise:
    """What one history's run means vary by (log units): ``between`` runs of one level,
    and each run's own share from its rounds (``within / n``)."""

    between: float  # variance of a run's true level around its segment's (tau^2)
    within: float  # pooled variance of one round around its run's mean
    df: int  # degrees of freedom of the run means' variance


@dataclass(frozen=True)
class ChangePoint:
    """A step into ``runs[start:]`` (up to the next step) from the segment before."""

    start: int  # index of the first run at the new level
    before: float  # level before (geometric mean)
    after: float  # level after
    change: float  # after / before - 1
    lo: float  # its 1 - 2 alpha interval
    hi: float
    p: float  # of "beyond the band", Bonferroni-adjusted
    verdict: Verdict
    worse: bool  # in the metric's bad direction

    @property
    def regression(self) -> bool:
        return self.verdict == "changed" and self.worse


def _logs(rounds: Sequence[Sequence[float]]) -> list[np.ndarray]:
    out = []
    for i, r in enumerate(rounds):
        a = np.asarray(r, dtype=float)
        if len(a) == 0 or not np.all(a > 0):
            raise ValueError(f"run {i} has no positive round values")
        out.append(np.log(a))
    return out


def _noise(logs: list[np.ndarray], starts: list[int]) -> Noise:
    """Between- and within-run variance of a history cut at ``starts``."""
    n_i = np.array([len(a) for a in logs])
    means = np.array([a.mean() for a in logs])
    ss_w = sum(float(((a - a.mean()) ** 2).sum()) for a in logs)
    df_w = int((n_i - 1).sum())
    within = ss_w / df_w if df_w > 0 else 0.0
    bounds = [*starts, len(logs)]
    resid = np.concatenate([means[a:b] - means[a:b].mean()
                            for a, b in itertools.pairwise(bounds)])
    df_b = len(logs) - len(starts)
    total = float((resid ** 2).sum()) / df_b if df_b > 0 else 0.0
    # a cut fitted to the noise shrinks the residuals: never below the successive runs'
    robust = noise_sigma(means) ** 2 if len(logs) >= 3 else 0.0
    share = float(np.mean(within / n_i))
    between = max(total, robust) - share
    return Noise(between=max(between, 0.0), within=within, df=max(df_b, 1))


def _level(logs: list[np.ndarray], a: int, b: int, nz: Noise) -> tuple[float, float]:
    """Weighted mean of runs a..b-1's means, and its variance."""
    v = np.array([nz.between + nz.within / len(x) for x in logs[a:b]])
    v = np.maximum(v, _MIN_SIGMA ** 2)
    w = 1 / v
    m = np.array([x.mean() for x in logs[a:b]])
    return float((w * m).sum() / w.sum()), float(1 / w.sum())


def _judge(logs: list[np.ndarray], starts: list[int], k: int, nz: Noise, *,
           direction: Direction, band: float, alpha: float, tests: int) -> ChangePoint:
    bounds = [*starts, len(logs)]
    m0, v0 = _level(logs, bounds[k - 1], bounds[k], nz)
    m1, v1 = _level(logs, bounds[k], bounds[k + 1], nz)
    d, se = m1 - m0, math.sqrt(v0 + v1)
    # whole-round between-run estimate: its df; exact rounds with no between-run
    # spread are judged by the rounds alone (many df)
    df = nz.df if nz.between > 0 else max(nz.df, 30)
    edge = math.log1p(band)
    p_beyond = float(sps.t.sf((abs(d) - edge) / se, df))
    p = min(1.0, p_beyond * tests)
    q = float(sps.t.ppf(1 - alpha, df))
    lo, hi = d - q * se, d + q * se
    if p < alpha:
        verdict: Verdict = "changed"
    elif -edge < lo and hi < edge:
        verdict = "within_noise"
    else:
        verdict = "inconclusive"
    change = math.expm1(d)
    return ChangePoint(start=starts[k], before=math.exp(m0), after=math.exp(m1),
                       change=change, lo=math.expm1(lo), hi=math.expm1(hi), p=p,
                       verdict=verdict, worse=is_worse(change, direction))


def change_points(rounds: Sequence[Sequence[float]], direction: Direction, *,
                  band: float = 0.01, alpha: float = 0.05, keep_undecided_newest: bool = True
                  ) -> list[ChangePoint]:
    """Every step of a history (``rounds[i]``: run i's per-round values, positive,
    oldest first) called changed; and, with ``keep_undecided_newest``, a step into the
    newest runs that is not decided yet (so a gate can say "run again")."""
    logs = _logs(rounds)
    n = len(logs)
    if n < 2:
        return []
    means = [float(a.mean()) for a in logs]
    starts = segments(means)
    tests = max(n - 1, 1)
    while True:
        nz = _noise(logs, starts)
        judged = [_judge(logs, starts, k, nz, direction=direction, band=band, alpha=alpha,
                         tests=tests) for k in range(1, len(starts))]
        weak = [(c.p, k) for k, c in enumerate(judged, 1) if c.verdict != "changed"]
        if not weak:
            return judged
        if keep_undecided_newest and len(weak) == 1 and weak[0][1] == len(starts) - 1 \
                and judged[-1].verdict == "inconclusive":
            return judged
        _p, k = max(weak)
        starts = starts[:k] + starts[k + 1:]


def newest_regression(points: list[ChangePoint], threshold: float) -> ChangePoint | None:
    """The step the newest run's level came through, when it is a regression beyond
    ``threshold`` (or a worse step not decided yet): what a CI gate reports."""
    if not points:
        return None
    last = points[-1]
    if last.worse and abs(last.change) > threshold and last.verdict != "within_noise":
        return last
    return None
