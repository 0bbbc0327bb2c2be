"""The exact McNemar test: is one arm losing items the other passes?"""

from __future__ import annotations


def mcnemar_p(lost: int, gained: int) -> float:
    """Two-sided exact McNemar p on the discordant items (a binomial test at 1/2);
    1 when no item changed its verdict."""
    from scipy.stats import binomtest  # scipy is heavy: loaded when a test runs

    if lost + gained == 0:
        return 1.0
    return float(binomtest(min(lost, gained), lost + gained, 0.5).pvalue)
