"""The A/A noise floor of every row, as data and as text (``abbench calibrate``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from abbench.config.stats import StatsConfig
from abbench.model.records import Record
from abbench.model.rounds import comparable_records
from abbench.model.runmeta import MetaLike, as_meta
from abbench.report.tablemodel import Table
from abbench.report.text import md_escape
from abbench.stats.paired import rounds_needed
from abbench.stats.variance import (
    MAX_REPS,
    Components,
    LifeTiming,
    RepsPlan,
    cheapest,
    life_timing,
    plan_reps,
    plan_run,
    rep_values,
    row_components,
)


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
                # "changed" is a one-sided test at alpha at the band's edge
                need_ch = rounds_needed(sigma, math.log1p(effect) - math.log1p(band),
                                        alpha=2 * s.alpha)
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
             "| row | n | sd of ln(twin/arm) per round | A/A change "
             f"[{(1 - 2 * s.alpha) * 100:g}% interval] | "
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
              "'changed' is a one-sided test at alpha that the effect lies beyond the noise "
              "band, so there delta is the effect minus the band and t(1-alpha) replaces "
              "t(1-alpha/2). The suggested band is the largest |end| of the A/A "
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


# ------------------------------------------------------------ variance components


@dataclass(frozen=True)
class RowNoise:
    """Where one table row's noise comes from, and the reps and rounds it asks for."""

    row: str
    metric: str
    #: arm -> components of ln(value); ``pooled``: every arm's lives together
    arms: dict[str, Components]
    pooled: Components
    #: reps 1..8: rounds for the effect and their time
    plans: list[RepsPlan]
    best: RepsPlan | None
    #: the A/A sd of the per-round log-ratio, as measured with the run's reps
    measured_sigma: float | None


@dataclass(frozen=True)
class NoiseSources:
    rows: list[RowNoise]
    timing: LifeTiming | None
    arms: int
    #: the run's reps per life
    reps: int
    #: the cheapest reps for every row at once (the row needing most rounds decides)
    run_plan: RepsPlan | None
    #: table rows without two reps in a life (one value per life: peak memory)
    skipped: list[str]


def noise_sources(table: Table, records: list[Record], meta: MetaLike, *,
                  effect: float, settings: StatsConfig | None = None) -> NoiseSources:
    """The variance components of every table row that has reps, from a run's records
    (the comparable ones: rounds every arm finished), and the reps and rounds each
    row, and the run as a whole, would need for ``effect``."""
    s = settings or StatsConfig()
    meta = as_meta(meta)
    records = comparable_records(records, meta)
    values = rep_values(records)
    timing = life_timing(records)
    arms = len(table.arms)
    out, skipped = [], []
    for row in table.rows:
        by_arm = values.get((row.workload, row.metric))
        per, pool = row_components({a: by_arm[a] for a in table.arms if a in by_arm}) \
            if by_arm else ({}, None)
        if pool is None or pool.var_within is None or pool.var_between is None:
            skipped.append(row.label)
            continue
        plans = plan_reps(pool, effect=effect, timing=timing, arms=arms, alpha=s.alpha)
        twin = [c.comparison for a, c in row.cells.items() if a != table.baseline]
        measured = twin[0].sd_log if twin and twin[0] is not None else None
        out.append(RowNoise(row.label, row.metric, per, pool, plans, cheapest(plans),
                            measured))
    run_plan = plan_run({r.row: r.plans for r in out}, timing=timing, arms=arms)
    return NoiseSources(out, timing, arms, meta.reps, run_plan, skipped)


def _dur(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _share(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.0f}%"


def _plan(p: RepsPlan | None, with_reps: bool = False) -> str:
    """``94 (16 min)``; with the reps: ``1 rep x 94 rounds, 16 min``."""
    if p is None or p.rounds is None:
        return "–"
    if not with_reps:
        return f"{p.rounds} ({_dur(p.seconds)})" if p.seconds is not None else f"{p.rounds}"
    time = f", {_dur(p.seconds)}" if p.seconds is not None else ""
    return f"{p.reps} rep{'s' if p.reps > 1 else ''} x {p.rounds} rounds{time}"


def render_noise_sources(ns: NoiseSources, *, effect: float, labels: dict[str, str],
                         settings: StatsConfig | None = None) -> str:
    """Markdown: the components per row and arm, the timing of a life, and the reps
    and rounds for the effect."""
    s = settings or StatsConfig()
    lines = ["Where the noise comes from: a one-way random-effects ANOVA of ln(value) "
             "per arm (and the arms pooled), reps within a server life against the "
             "means of the lives:", ""]
    if not ns.rows:
        why = (f"the run has {ns.reps} rep per server life: set reps: 2 or more to "
               "separate the spread within a life from the spread between lives"
               if ns.reps < 2 else "no table row has reps in two or more lives")
        return "\n".join([*lines, f"Not available: {why}."]) + "\n"
    lines += ["| row | arm | lives x reps | sd within a life | sd between lives | "
              "share between |", "|---|---|---|---|---|---|"]
    for r in ns.rows:
        first = True
        for arm, c in [*r.arms.items(), ("", r.pooled)]:
            name = md_escape(labels.get(arm, arm)) if arm else "pooled"
            reps = f"{c.reps:g}" if c.reps == int(c.reps) else f"{c.reps:.1f}"
            lines.append(f"| {r.row if first else ''} | {name} | {c.lives} x {reps} | "
                         f"{_p(c.sigma_within)} | {_p(c.sigma_between)} | "
                         f"{_share(c.between_share)} |")
            first = False
    t = ns.timing
    lines.append("")
    if t is not None:
        per_row = ", ".join(f"{md_escape(row)} {_dur(v)}" for row, v in t.rep_s.items())
        lines += [f"A server life took {_dur(t.life_s)} (median of {t.lives}): "
                  f"{_dur(t.overhead_s)} to start, warm up, check and stop it, and "
                  f"{_dur(t.rep_all_s)} per rep of every row ({per_row}).", ""]
    cost = (f"; the time is rounds x {ns.arms} arms x ({_dur(t.overhead_s)} + reps x "
            f"{_dur(t.rep_all_s)})" if t is not None else "")
    lines += [f"Reps and rounds for a {effect * 100:g}% effect (p<{s.alpha:g}, 80% power), "
              "from the pooled components: a round's log-ratio has sd "
              f"sqrt(2 (sd_between^2 + sd_within^2 / reps)){cost}. Each cell: rounds "
              "(time). The model's sd takes the lives as independent; the A/A one is "
              "measured over this run's rounds.", "",
              f"| row | sd per round at {ns.reps} reps: model (A/A) | "
              + " | ".join(f"{k} rep{'s' if k > 1 else ''}" for k in range(1, MAX_REPS + 1))
              + " | cheapest |",
              "|---|---|" + "---|" * MAX_REPS + "---|"]
    for r in ns.rows:
        model = r.pooled.log_ratio_sd(ns.reps)
        cells = " | ".join(_plan(p) for p in r.plans)
        lines.append(f"| {r.row} | {_p(model)} ({_p(r.measured_sigma)}) | {cells} | "
                     f"{_plan(r.best, True)} |")
    if ns.run_plan is not None:
        lines += ["", "For the whole run (each life runs every row, so the row that needs "
                  f"the most rounds decides): {_plan(ns.run_plan, True)}."]
    if ns.skipped:
        lines += ["", "Rows with one value per server life have no spread within a life: "
                  + ", ".join(ns.skipped) + "."]
    return "\n".join(lines) + "\n"
