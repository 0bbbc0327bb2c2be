"""Regressions in a metric's history: pure functions from values to findings.

Two detectors, as the trusted tools do (see notes/statistics.md, "History"):

- **steps** (asv-style): a piecewise-constant fit of the log values by optimal
  partitioning with a penalty per segment (solved exactly with PELT pruning; L2
  cost on log values, where asv uses L1, so that each step is one vectorized
  numpy pass). A level lasts at least two runs, except the newest one (so that
  one odd run cannot split a step in two, yet a regression shows in the first run
  that has it). The noise level is estimated robustly from successive
  differences. A step between two segments whose levels differ by more than the
  threshold, in the metric's bad direction, is a regression.
- **lookback z-score** (Conbench-style): the newest value against the previous
  ``window`` values with outliers (modified z-score > 3.5) removed; a regression
  when it is worse by more than the threshold and ``|z| >= z_min`` (with fewer
  than 3 reference values only the threshold applies).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Direction = Literal["higher", "lower"]

#: median |x_i+1 - x_i| of Gaussian noise is 0.6745 * sqrt(2) sigma
_DIFF_MAD_TO_SIGMA = 1 / (0.6744897501960817 * math.sqrt(2))
_MIN_SIGMA = 1e-3  # 0.1% in log units: below this, noise estimates are not trusted


@dataclass(frozen=True)
class Step:
    """A change of level: values[start:] (up to the next step) against the segment before."""

    start: int  # index of the first value of the new level
    before: float  # level before (geometric mean of its segment)
    after: float  # level after
    change: float  # after / before - 1
    regression: bool


@dataclass(frozen=True)
class Finding:
    """The newest value regressed: by ``change`` since index ``since`` (``ref`` is the
    last value still at the old level)."""

    method: Literal["step", "z-score"]
    change: float
    since: int
    ref: int
    z: float | None = None


def is_worse(change: float, direction: Direction, threshold: float) -> bool:
    return change < -threshold if direction == "higher" else change > threshold


def noise_sigma(logs: np.ndarray) -> float:
    """A robust estimate of the noise of log values, from successive differences."""
    if len(logs) < 3:
        return _MIN_SIGMA
    d = np.abs(np.diff(logs))
    return max(float(np.median(d)) * _DIFF_MAD_TO_SIGMA, _MIN_SIGMA)


def segments(values: Sequence[float], sigma: float | None = None) -> list[int]:
    """Start indices of the segments of the best piecewise-constant fit of the log
    values (PELT)."""
    logs = np.log(np.asarray(values, dtype=float))
    logs -= logs.mean() if len(logs) else 0.0  # centred: sums of squares stay exact
    n = len(logs)
    if n < 2:
        return [0] * n
    sigma = noise_sigma(logs) if sigma is None else sigma
    beta = sigma ** 2 * max(4 * math.log(n), 9.0)
    s1 = np.concatenate(([0.0], np.cumsum(logs)))
    s2 = np.concatenate(([0.0], np.cumsum(logs ** 2)))
    f = np.empty(n + 1)
    f[0] = -beta
    last = np.zeros(n + 1, dtype=np.int64)
    cands = np.array([0], dtype=np.int64)
    for t in range(1, n + 1):
        # a level lasts at least two values, except the newest (a fresh regression)
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


def steps(values: Sequence[float], direction: Direction, threshold: float = 0.05, *,
          starts: list[int] | None = None) -> list[Step]:
    """Every change of level in ``values`` (positive numbers, oldest first);
    ``starts``: their :func:`segments` when already known."""
    logs = np.log(np.asarray(values, dtype=float))
    starts = segments(values) if starts is None else starts
    bounds = [*starts, len(logs)]
    levels = [float(np.mean(logs[a:b])) for a, b in itertools.pairwise(bounds)]
    out = []
    for i in range(1, len(starts)):
        change = math.exp(levels[i] - levels[i - 1]) - 1
        out.append(Step(start=starts[i], before=math.exp(levels[i - 1]),
                        after=math.exp(levels[i]), change=change,
                        regression=is_worse(change, direction, threshold)))
    return out


def lookback(values: Sequence[float], direction: Direction, threshold: float = 0.05,
             window: int = 20, z_min: float = 3.0) -> Finding | None:
    """The newest value against the ``window`` before it (outliers removed)."""
    if len(values) < 2:
        return None
    logs = np.log(np.asarray(values, dtype=float))
    first = max(0, len(logs) - 1 - window)
    ref = logs[first:-1]
    if len(ref) >= 3:
        med = np.median(ref)
        mad = np.median(np.abs(ref - med))
        if mad > 0:
            ref = ref[np.abs(0.6745 * (ref - med) / mad) <= 3.5]
    mean = float(np.mean(ref))
    change = math.exp(float(logs[-1]) - mean) - 1
    z = None
    if len(ref) >= 3:
        sd = max(float(np.std(ref, ddof=1)), _MIN_SIGMA)
        z = (float(logs[-1]) - mean) / sd
    if not is_worse(change, direction, threshold) or (z is not None and abs(z) < z_min):
        return None
    return Finding("z-score", change, since=len(logs) - 1, ref=len(logs) - 2, z=z)


def check_newest(values: Sequence[float], direction: Direction, threshold: float = 0.05,
                 window: int = 20, z_min: float = 3.0, *, starts: list[int] | None = None
                 ) -> Finding | None:
    """Did the newest value regress beyond ``threshold``? A step into the newest
    level is preferred (it says since when); else the lookback z-score decides."""
    found = steps(values, direction, threshold, starts=starts)
    if found and found[-1].regression:
        last = found[-1]
        newest = math.log(values[-1])
        # the newest value itself must sit at the new level, not back near the old one
        if is_worse(math.exp(newest - math.log(last.before)) - 1, direction, threshold):
            return Finding("step", last.change, since=last.start, ref=last.start - 1)
    return lookback(values, direction, threshold, window, z_min)
