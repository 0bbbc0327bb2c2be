"""Verdicts as text: a cell's comparison, the legend, the per-row details, how the
number of rounds was chosen."""

from __future__ import annotations

import math

from abbench.model.rows import SERVER_ROW
from abbench.report.tablemodel import Table
from abbench.report.text import md_escape
from abbench.stats.blocks import BlockComparison
from abbench.stats.decide import LIVES_BELOW, LIVES_FROM, PROB, reads_lives
from abbench.stats.families import SELECT
from abbench.stats.kinds import MIRRORS
from abbench.stats.paired import Comparison


def _pct(x: float, digits: int = 1) -> str:
    if not math.isfinite(x):
        return "∞" if x > 0 else "-∞"
    v = round(x * 100, digits)
    return f"{v if v != 0 else 0.0:+.{digits}f}"  # no "-0.0" for a change that rounds to 0


#: beyond this many rounds in all a "?" cell says only that it needs many more. The
#: "80%" of a k holds over the cells that state one, not for each k (the sd of few rounds
#: is uncertain, and the cells whose rounds happened to be quiet state the short k's):
#: a limit that drops the noisy cells' long k's keeps the quiet ones, which fall short.
#: At 200, 3% noise per arm, from 3 rounds: 28-32% of the undecided cells stated a k,
#: decided at n + k in 57%; at 1000, 83%, decided in 74.7% (docs/simulation.md, the
#: eighth pass)
MANY_ROUNDS = 1000
#: the line under the table names apart the rounds that would decide the cells needing
#: at most this many in all
FEW_ROUNDS = 200


def _more_hosts(c: Comparison) -> bool:
    """An undecided cell over hosts that disagree: hosts, not rounds, would decide it."""
    return isinstance(c, BlockComparison) and c.method == "random"


def more_rounds(c: Comparison) -> str:
    """``~6 more rounds`` for an undecided cell, at the noise observed (``~3 more hosts``
    where its hosts disagree)."""
    if isinstance(c, BlockComparison) and _more_hosts(c):
        have = len(c.hosts)
        if c.hosts_needed is None or c.hosts_needed > MANY_ROUNDS:
            return "needs many more hosts"
        k = max(1, c.hosts_needed - have)
        return f"~{k} more host{'s' if k > 1 else ''}"
    if c.verdict == "too_few_rounds":  # one round: no spread yet, so no estimate either
        return "needs a 2nd round to show its noise"
    bimodal = ", bimodal noise" if c.bimodal is not None else ""
    if c.rounds_needed is None or c.rounds_needed > MANY_ROUNDS:
        return f"needs >{MANY_ROUNDS} rounds{f' ({bimodal[2:]})' if bimodal else ''}"
    k = max(1, c.rounds_needed - c.n)
    plural = "s" if k > 1 else ""
    if c.agrees:  # the sign test's rounds (families.rounds_for)
        return f"about {k} more round{plural} (if they go on agreeing)"
    return f"about {k} more round{plural} ({PROB * 100:g}%{bimodal})"


def render_comparison(c: Comparison) -> str:
    """``(+2.8% [+2.1, +3.5]) ▲``, ``(-40.2%, exact) ▼``, ``(+0.3% [-2.1, +2.7]) ? ~6 more
    rounds``."""
    if c.change is None:
        return "(no log-ratio: values <= 0)"
    if c.exact:
        inner = f"{_pct(c.change)}%, exact"
    elif c.lo is None or c.hi is None or not math.isfinite(c.lo):
        inner = f"{_pct(c.change)}%"
    else:
        inner = f"{_pct(c.change)}% [{_pct(c.lo)}, {_pct(c.hi)}]"
    if c.verdict in ("inconclusive", "too_few_rounds"):
        return f"({inner}) ? {more_rounds(c)}"
    return f"({inner}) {c.mark}"


def _comparisons(table: Table) -> list[Comparison]:
    return [c.comparison for r in table.rows + table.hidden for c in r.cells.values()
            if c.comparison is not None]


def legend_lines(table: Table) -> list[str]:
    comps = _comparisons(table)
    if not comps:
        return []
    alpha = comps[0].alpha
    bands = sorted({c.noise_band for c in comps})
    band_s = "/".join(f"±{b * 100:g}%" for b in bands)
    level = f"{(1 - 2 * alpha) * 100:g}%"
    two = any(c.n == 2 and not c.exact and c.kind != "counted" for c in comps)
    half = (f" ({alpha * 50:g}% for a timed cell of 2 rounds: two server lives an arm "
            "cannot tell a change from lives that sit on two levels)") if two else ""
    if any(c.bimodal is not None and reads_lives(c.n) for c in comps):
        half += (f" (a timed cell of {LIVES_FROM} to {LIVES_BELOW - 1} rounds with at least "
                 "the sd of server lives on two levels, where the table's lives sit on two "
                 "and an arm has lives on both)")
    return [
        "Cells: each round's value (a / b), their range (min-max) or the one value every "
        f"round gave; (±x% [lo, hi]) is the change against the baseline with its {level} "
        f"interval. ▲ better / ▼ worse: changed (beyond {band_s}: a one-sided test at the "
        "band's edge, its sd moderated towards those of the like cells (one metric, one "
        "family, three cells or more) as far as their rounds' correlation allows, "
        f"p < {alpha * 100:g}%{half} after Benjamini-Hochberg within each family of "
        "cells: the table's timed cells, and its counts (quality passes, goodput, tested "
        "as counts), split alpha 9 to 1 when both are there; in a family of 5 or more, "
        f"over the cells whose p is at most {SELECT:g}, at p / {SELECT:g}; the rows not "
        f"shown at {alpha * 100:g}% times the share of the table's cells that changed. So "
        f"a table where nothing changed says \"changed\" in under {alpha * 100:g}% of runs; "
        "the interval then clears the band); "
        f"≈ within noise (the interval inside {band_s}); ? not decided yet (about how many "
        f"more rounds would decide it with {PROB * 100:g}% probability at the noise seen, "
        "which a few rounds can understate: a small k from them is often short); "
        "exact: every round gave the same value of a metric that does not vary (memory, "
        "token counts), decided on the change as printed and outside the test families.",
    ]




def also_changed(table: Table) -> str | None:
    """One line naming, per arm, every changed cell of a row the table does not show:
    ``Also changed: -b/-ub 2048: prefill 32K +58.2% ▲, TTFT 32K -36.8% ▲``. Rows that
    only mirror a shown one (server timings, device VRAM, a workload's peak memory equal
    to the server life's) are left to the details."""
    shown_memory = {r.metric for r in table.rows if r.workload == SERVER_ROW}
    per_arm: dict[str, list[str]] = {}
    for row in table.hidden:
        if row.metric in MIRRORS or (row.metric in shown_memory and row.workload != SERVER_ROW):
            continue
        for arm, cell in row.cells.items():
            c = cell.comparison
            if c is not None and c.verdict == "changed" and c.change is not None:
                where = row.workload.removeprefix("decode ")  # "TTFT 32K + side calls"
                label = f"{row.spec.label} {where}" if row.workload != SERVER_ROW \
                    else row.spec.label
                per_arm.setdefault(arm, []).append(f"{md_escape(label)} {_pct(c.change)}% "
                                                   f"{c.mark}")
    if not per_arm:
        return None
    parts = [f"{md_escape(table.labels.get(a, a))}: {', '.join(v)}" for a, v in per_arm.items()]
    return "Also changed (rows not in the table; figures in the details): " + \
        "; ".join(parts) + "."


def rounds_line(table: Table) -> str | None:
    """How many rounds in all the table's undecided cells would likely need."""
    need = [c for r in table.rows for cell in r.cells.values()
            for c in [cell.comparison] if c is not None
            and c.verdict in ("inconclusive", "too_few_rounds")]
    hosts = [c for c in need if _more_hosts(c)]
    need = [c for c in need if not _more_hosts(c)]
    tail = f" {len(hosts)} undecided cell{'s' if len(hosts) > 1 else ''} over hosts that " \
        "disagree would need more hosts, not more rounds." if hosts else ""
    if not need:
        return tail.strip() or None
    n = max(c.n for c in need)
    agree = [c.rounds_needed for c in need if c.agrees and c.rounds_needed is not None]
    known = sorted(c.rounds_needed for c in need if c.rounds_needed is not None
                   and not c.agrees)
    within = [k for k in known if k <= MANY_ROUNDS]
    few = [k for k in within if k <= FEW_ROUNDS]
    text = f"Undecided cells: {len(need)} (this run has {n} rounds)"
    if within:
        every = len(within) == len(need)
        split = 0 < len(few) < len(within)  # what a run can afford, then the rest
        first, which = (max(few), f"{len(few)} of them") if split else \
            (max(within), "each of them" if every else f"{len(within)} of them")
        text += f"; at the noise observed, about {first} rounds in all would decide " \
            f"{which} with {PROB * 100:g}% probability"
        if split:
            rest = f"all {len(need)}" if every else f"{len(within)} of them"
            text += f", and about {max(within)} would decide {rest}"
    if agree:
        text += f"; {len(agree)} whose rounds all agree, by {max(agree)} rounds in all if " \
            "they go on agreeing (the sign test)"
    if len(within) + len(agree) < len(need):
        k = len(need) - len(within) - len(agree)
        text += f"; {k} would need more than {MANY_ROUNDS} (close to the band's edge, or " \
            "too noisy)"
    return text + "." + tail


def _f(x: float | None, fmt: str = ".3g") -> str:
    return "–" if x is None else format(x, fmt)


def details_lines(table: Table) -> list[str]:
    """Per row and arm: n, p, test, cross-check, outliers, CV, drift and warnings."""
    lines = ["| row | arm | n | verdict | p beyond band (BH) | test | Wilcoxon p / HL [interval] | "
             "sd(d) | outlier rounds | drift across run | warnings |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    any_row = False
    for row in table.rows + table.hidden:
        for arm, cell in row.cells.items():
            c = cell.comparison
            if c is None:
                continue
            any_row = True
            hl = "–" if c.hl is None or c.hl_lo is None or c.hl_hi is None else \
                f"{_f(c.wilcoxon_p)} / {_pct(c.hl)}% [{_pct(c.hl_lo)}, {_pct(c.hl_hi)}]"
            outl = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in c.outliers.items()
                             if v) or "none"
            dr = ", ".join(f"{k} {_pct(v)}%" for k, v in c.drift.items() if v is not None) \
                or "–"
            sd = "–" if c.sd_log is None else f"{c.sd_log * 100:.2f}%"
            p = f"{_f(c.p)} (raw {_f(c.p_raw)})" if c.p is not None else "–"
            warn = "; ".join(c.warnings) or "–"
            who = md_escape(table.labels.get(arm, arm))
            lines.append(f"| {md_escape(row.label)} | {who} | {c.n} | "
                         f"{c.verdict} | {p} | {c.test} | {hl} | {sd} | {outl} | {dr} | "
                         f"{md_escape(warn)} |")
    return lines if any_row else []
