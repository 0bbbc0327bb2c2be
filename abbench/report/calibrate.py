"""The A/A noise floor of every row, as data and as text (``abbench calibrate``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from abbench.config.stats import StatsConfig
from abbench.report.table import Table
from abbench.stats.paired import rounds_needed


@dataclass(frozen=True)
class Floor:
    """The noise floor of one table row, from an A/A run."""

    row: str
    metric: str
    n: int
    #: sd of ln(twin / arm) per round
    sigma: float | None
    change: float | None
    lo: float | None
    hi: float | None
    half_width: float | None
    verdict: str
    #: rounds for p < alpha with 80% power at the effect asked for
    rounds_for_effect: int | None
    #: rounds for a "changed" verdict (interval beyond the band) at that effect
    rounds_for_changed: int | None
    #: the smallest band this A/A run would call within noise: max |interval end|
    suggested_band: float | None


def noise_floor(table: Table, *, effect: float, settings: StatsConfig | None = None
                ) -> list[Floor]:
    """One :class:`Floor` per row of an A/A table (twin against arm)."""
    s = settings or StatsConfig()
    out = []
    for row in table.rows:
        twin = [c for a, c in row.cells.items() if a != table.baseline]
        c = twin[0].comparison if twin else None
        if c is None:
            continue
        sigma = c.sd_log
        band = s.band(row.metric)
        need = need_ch = None
        if sigma is not None:
            need = rounds_needed(sigma, math.log1p(effect), alpha=s.alpha)
            if effect > band:
                need_ch = rounds_needed(sigma, math.log1p(effect) - math.log1p(band),
                                        alpha=s.alpha)
        ends = [abs(x) for x in (c.t_lo, c.t_hi) if x is not None and math.isfinite(x)]
        out.append(Floor(row=row.label, metric=row.metric, n=c.n, sigma=sigma,
                         change=c.change, lo=c.t_lo, hi=c.t_hi, half_width=c.half_width,
                         verdict=c.verdict, rounds_for_effect=need,
                         rounds_for_changed=need_ch,
                         suggested_band=max(ends) if len(ends) == 2 else None))
    return out


def _p(x: float | None, sign: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x * 100:+.2f}%" if sign else f"{x * 100:.2f}%"


def render_calibration(floors: list[Floor], *, arm: str, effect: float,
                       settings: StatsConfig | None = None) -> str:
    s = settings or StatsConfig()
    lines = [f"A/A calibration of arm `{arm}` (the arm against its identical twin):", "",
             "| row | n | sd of ln(twin/arm) per round | A/A change [95% interval] | "
             f"half-width | verdict | rounds for {effect * 100:g}% (p<{s.alpha:g}, 80% power)"
             f" | rounds for 'changed' at {effect * 100:g}% | suggested band |",
             "|---|---|---|---|---|---|---|---|---|"]
    for f in floors:
        half = None if f.half_width is None else math.expm1(f.half_width)
        lines.append(
            f"| {f.row} | {f.n} | {_p(f.sigma)} | {_p(f.change, True)} [{_p(f.lo, True)}, "
            f"{_p(f.hi, True)}] | {_p(half)} | {f.verdict} | {f.rounds_for_effect or '–'} | "
            f"{f.rounds_for_changed or '–'} | {_p(f.suggested_band)} |")
    lines += ["", "Rounds use n = ((t(1-alpha/2) + t(0.8)) sigma / delta)^2 with t quantiles; "
              "'changed' needs the interval beyond the noise band, so delta there is the "
              "effect minus the band. The suggested band is the largest |end| of the A/A "
              "interval: a smaller band would not call this A/A run within noise."]
    return "\n".join(lines) + "\n"


def band_yaml(floors: list[Floor]) -> str:
    """A ``stats: noise_bands:`` snippet for arms.yaml (per metric, widest row)."""
    bands: dict[str, float] = {}
    for f in floors:
        if f.suggested_band is not None:
            bands[f.metric] = max(bands.get(f.metric, 0.0), f.suggested_band)
    body = "".join(f"    {m}: {math.ceil(b * 1000) / 10:g}%\n" for m, b in bands.items())
    return "# suggested by abbench calibrate (A/A noise floor)\nstats:\n  noise_bands:\n" + body
