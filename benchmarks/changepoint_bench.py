"""Change points in simulated histories: the detector `history --check` uses now
(abbench.stats.regression.change_points: candidate steps judged with within-run and
between-run variance) against the detector it replaces (the same PELT on one value per
run, a step flagged when the levels differ by more than the 5% threshold) and against
ruptures' plain use (Pelt, L2 cost, BIC penalty from the robust noise of run means).

    .venv/bin/python benchmarks/changepoint_bench.py [--sims 30]
        [--markdown docs/changepoint-bench.md]

A history: ``n`` runs of 5 rounds; each run's level moves by the noise per run (log-
normal), its rounds by 0.5% around it; "bimodal": a machine that lands in one of two
states 4% apart at random each run (1% noise besides). Reported per detector:
- false alarms per 100 runs: calls on histories with no step (any call counts);
- detected: a call within 2 runs of a planted step at the middle of the history;
- delay: runs after the step until the first such call, the detector run on each
  prefix (online, as CI runs it); ">10" when not within 10 runs.
"""

from __future__ import annotations

import argparse
import itertools
import math
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from abbench.stats import regression

History = list[list[float]]
Detector = Callable[[History], list[int]]  # -> indices where a step is called

ROUNDS, ROUND_SD, MAX_DELAY, TOL = 5, 0.005, 10, 2


def simulate(rng: np.random.Generator, n: int, noise: float, step: float = 0.0,
             at: int | None = None, bimodal: float = 0.0) -> History:
    out = []
    for i in range(n):
        level = 100 * (1 + step if at is not None and i >= at else 1.0) \
            * math.exp(rng.normal(0, noise))
        if bimodal and rng.random() < 0.5:
            level *= 1 + bimodal
        out.append(list(level * np.exp(rng.normal(0, ROUND_SD, ROUNDS))))
    return out


def judged(h: History) -> list[int]:
    return [c.start for c in regression.change_points(h, "higher") if c.verdict == "changed"]


def legacy(h: History, threshold: float = 0.05) -> list[int]:
    """The replaced detector: one value per run (the rounds' mean), PELT, a step
    flagged beyond the threshold."""
    logs = np.log([statistics.fmean(r) for r in h])
    starts = regression.segments(logs)
    bounds = [*starts, len(logs)]
    levels = [float(np.mean(logs[a:b])) for a, b in itertools.pairwise(bounds)]
    return [starts[i] for i in range(1, len(starts))
            if abs(math.expm1(levels[i] - levels[i - 1])) > threshold]


def ruptures_plain(h: History) -> list[int]:
    import ruptures as rpt

    logs = np.log([statistics.fmean(r) for r in h])
    sigma = regression.noise_sigma(logs)
    pen = 2 * sigma ** 2 * math.log(len(logs))  # BIC for a mean shift in Gaussian noise
    bkps = rpt.Pelt(model="l2", min_size=2, jump=1).fit(logs.reshape(-1, 1)).predict(pen=pen)
    return [b for b in bkps if b < len(logs)]


DETECTORS: dict[str, Detector] = {"abbench (rounds + runs judged)": judged,
                                  "replaced: PELT + 5% threshold": legacy,
                                  "ruptures Pelt, plain": ruptures_plain}


def false_alarms(det: Detector, sims: int, n: int, noise: float, bimodal: float,
                 seed: int) -> float:
    rng = np.random.default_rng(seed)
    calls = sum(len(det(simulate(rng, n, noise, bimodal=bimodal))) for _ in range(sims))
    return 100 * calls / (sims * n)


def detection(det: Detector, sims: int, noise: float, step: float, seed: int
              ) -> tuple[float, float]:
    """(share detected on the whole history of 40 runs, median delay online)."""
    rng = np.random.default_rng(seed)
    n, at = 40, 20
    found, delays = 0, []
    for _ in range(sims):
        h = simulate(rng, n, noise, step=-step, at=at)
        found += any(abs(s - at) <= TOL for s in det(h))
        delay = MAX_DELAY + 1
        for k in range(1, MAX_DELAY + 1):
            if any(abs(s - at) <= TOL for s in det(h[:at + k])):
                delay = k
                break
        delays.append(delay)
    return found / sims, statistics.median(delays)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=30)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    t0 = time.process_time()
    lines = ["# Change-point benchmark", "",
             "Command: `.venv/bin/python benchmarks/changepoint_bench.py --markdown "
             "docs/changepoint-bench.md`", "",
             f"{args.sims} simulated histories per cell; 5 rounds a run (0.5% round noise); "
             f"{platform.machine()}, Python {platform.python_version()}.", "",
             "## False alarms per 100 runs (no step)", "",
             "| detector | " + " | ".join(
                 f"{n} runs, {x}" for n in (20, 50, 200)
                 for x in ("1%", "2%", "5%", "bimodal")) + " |",
             "|---" * 13 + "|"]
    for name, det in DETECTORS.items():
        cells = []
        for n in (20, 50, 200):
            sims = max(5, args.sims * 20 // n)
            for noise, bim in ((0.01, 0.0), (0.02, 0.0), (0.05, 0.0), (0.01, 0.04)):
                cells.append(f"{false_alarms(det, sims, n, noise, bim, seed=n):.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Steps: detected (within 2 runs, 40-run history, step at run 20) and "
              "median delay online (runs after the step; >10: not within 10)", "",
              "| detector | " + " | ".join(f"{int(s * 100)}% step, {int(x * 100)}% noise"
                                           for x in (0.01, 0.02, 0.05)
                                           for s in (0.01, 0.02, 0.05, 0.10)) + " |",
              "|---" * 13 + "|"]
    for name, det in DETECTORS.items():
        cells = []
        for noise in (0.01, 0.02, 0.05):
            for step in (0.01, 0.02, 0.05, 0.10):
                share, delay = detection(det, args.sims, noise, step, seed=7)
                d = ">10" if delay > MAX_DELAY else f"{delay:g}"
                cells.append(f"{share * 100:.0f}%, {d}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", f"CPU time: {time.process_time() - t0:.0f} s."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
