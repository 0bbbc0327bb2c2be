"""The stopping rule of ``--until-ci``: when to look, at what alpha, and when to stop.

A stop on width alone does not depend on where the estimate lies, so it spends no
alpha by itself. A stop on verdicts does: before the last look it needs every watched
cell decided at :data:`EARLY` x alpha / (K - 1). The report pays only for the looks a
run took (:func:`report_alpha`): alpha less the per-look alpha of each look before the
last planned one, or the per-look alpha its stop on verdicts was decided at.
docs/simulation.md measures the A/A rate of the final report and the rate at the
band's edge (at most alpha) and the power against the fixed-rounds test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats as sps

from abbench.config.stats import StatsConfig
from abbench.stats.paired import Comparison


def block_size(rounds_done: int, n_arms: int) -> int:
    """Rounds to add next: up to the end of the current Latin block, so that arm
    positions stay balanced after every look."""
    return n_arms - rounds_done % n_arms


def max_rounds(settings: StatsConfig, first_rounds: int) -> int:
    """The cap: ``max_rounds``, else 4 x the planned rounds (at least 12)."""
    return settings.max_rounds or max(12, 4 * first_rounds)


def planned_looks(first_rounds: int, cap: int, n_arms: int) -> list[int]:
    """The rounds after which the stop rule looks, from the first rounds to the cap."""
    looks = [first_rounds]
    while looks[-1] < cap:
        looks.append(min(cap, looks[-1] + block_size(looks[-1], n_arms)))
    return looks


#: the share of alpha the looks before the last may spend on a stop on verdicts
EARLY = 0.2


def look_alphas(settings: StatsConfig, k_looks: int) -> tuple[float, float]:
    """(alpha of a stop on verdicts at a look before the last, alpha of the report of a
    run that stops otherwise) for a campaign with ``k_looks`` looks; (alpha, alpha)
    with one look."""
    if k_looks <= 1:
        return settings.alpha, settings.alpha
    return EARLY * settings.alpha / (k_looks - 1), settings.alpha


#: the reason :func:`stop_reason` gives for a stop on verdicts
ON_VERDICTS = "every watched cell has a verdict at the per-look alpha"


def report_alpha(settings: StatsConfig, alpha_look: float, reason: str | None,
                 early_looks: int) -> float:
    """The alpha the run's report decides at. After a stop on verdicts: the per-look
    alpha it stopped at. Otherwise alpha less what the looks that could have stopped on
    verdicts spent: ``early_looks`` (the looks taken before the last planned one) x the
    per-look alpha. A run that stops on width at its first look reports at
    alpha - alpha_look; one that runs to the cap pays for every look it took, as a
    stop on width, which comes when the rounds happen to agree, would otherwise push
    "changed" at the band's edge over alpha (docs/simulation.md, §6)."""
    if reason == ON_VERDICTS:
        return alpha_look
    return settings.alpha - alpha_look * early_looks


def half_width_95(c: Comparison) -> float:
    """The half-width of the cell's 95% t interval on the log scale, what ``--until-ci``
    holds to its target (inf below 2 rounds). The report shows the narrower 1 - 2 alpha
    interval; a stop on that width would come early more often where the rounds
    happened to agree, and the width stop's small bias towards "changed" with it
    (docs/simulation.md, §6)."""
    if c.sd_log is None or c.n < 2 or not math.isfinite(c.sd_log):
        return math.inf
    return float(sps.t.ppf(0.975, c.n - 1)) * c.sd_log / math.sqrt(c.n)


def stop_reason(nominal: Sequence[Comparison | None], spent: Sequence[Comparison | None], *,
                target: float, rounds_done: int, cap: int) -> str | None:
    """Why to stop after this look, or None to add a block.

    ``nominal``: the watched cells' comparisons (their 95% widths, :func:`half_width_95`,
    whatever alpha they were made at);
    ``spent``: the same at the per-look alpha (their verdicts).
    """
    if not nominal or any(c is None for c in nominal):
        return "no paired rounds to compare yet" if rounds_done >= cap else None
    widths = [half_width_95(c) for c in nominal if c is not None]
    if all(w <= math.log1p(target) for w in widths):
        return f"every watched 95% interval's half-width is at or under {target * 100:g}%"
    if spent and all(c is not None and c.verdict in ("changed", "within_noise") for c in spent):
        return ON_VERDICTS
    if rounds_done >= cap:
        return f"the cap of {cap} rounds was reached"
    return None
