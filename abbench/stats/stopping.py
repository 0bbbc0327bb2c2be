"""The stopping rule of ``--until-ci``: when to look, at what alpha, and when to stop.

The rule cannot inflate false "changed": a stop on width alone does not depend on
where the estimate lies, and a stop on verdicts needs every watched cell decided at
alpha / K (Bonferroni across the K looks the cap allows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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


def look_alpha(settings: StatsConfig, k_looks: int) -> float:
    return settings.alpha / max(1, k_looks)


def stop_reason(nominal: Sequence[Comparison | None], spent: Sequence[Comparison | None], *,
                target: float, rounds_done: int, cap: int) -> str | None:
    """Why to stop after this look, or None to add a block.

    ``nominal``: the watched cells' comparisons at alpha (their widths);
    ``spent``: the same at the per-look alpha (their verdicts).
    """
    if not nominal or any(c is None for c in nominal):
        return "no paired rounds to compare yet" if rounds_done >= cap else None
    widths = [c.half_width for c in nominal if c is not None]
    if all(w is not None and w <= math.log1p(target) for w in widths):
        return f"every watched interval's half-width is at or under {target * 100:g}%"
    if spent and all(c is not None and c.verdict in ("changed", "within_noise") for c in spent):
        return "every watched cell has a verdict at the per-look alpha"
    if rounds_done >= cap:
        return f"the cap of {cap} rounds was reached"
    return None
