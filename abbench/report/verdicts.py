"""Verdicts as text: a cell's comparison, the legend, the per-row details, how the
number of rounds was chosen."""

from __future__ import annotations

import math

from abbench.report.table import Table
from abbench.report.text import md_escape
from abbench.stats.paired import Comparison


def _pct(x: float, digits: int = 1) -> str:
    if not math.isfinite(x):
        return "∞" if x > 0 else "-∞"
    v = round(x * 100, digits)
    return f"{v if v != 0 else 0.0:+.{digits}f}"  # no "-0.0" for a change that rounds to 0


def render_comparison(c: Comparison) -> str:
    """``(+2.8% [+2.1, +3.5]) ▲``; too few rounds say so instead of a verdict."""
    if c.change is None:
        return "(no log-ratio: values <= 0)"
    if c.lo is None or c.hi is None or not math.isfinite(c.lo):
        inner = f"{_pct(c.change)}%"
    else:
        inner = f"{_pct(c.change)}% [{_pct(c.lo)}, {_pct(c.hi)}]"
    if c.verdict == "too_few_rounds":
        return f"({inner}) n={c.n}: too few rounds"
    return f"({inner}) {c.mark}"


def legend_lines(table: Table | None = None) -> list[str]:
    comps = [c.comparison for r in (table.rows if table else []) for c in r.cells.values()
             if c.comparison is not None]
    m = max((c.comparisons for c in comps), default=0)
    alpha = comps[0].alpha if comps else 0.05
    bands = sorted({c.noise_band for c in comps}) or [0.01]
    band_s = "/".join(f"±{b * 100:g}%" for b in bands)
    return [
        "Cells: per-round values (a / b) or their range (min-max); (±x% [lo, hi]) is the "
        "change against the baseline, exp(mean of ln(arm/baseline) per round) - 1, with its "
        "95% interval.",
        f"▲ better / ▼ worse (by the metric's direction): changed, p < {alpha:g} after Holm's "
        f"correction over {m} comparison(s) and the whole interval outside the noise band "
        f"({band_s}; with outlier rounds the t test must agree); ≈ within noise (interval "
        "inside the band); ? inconclusive (more rounds "
        "needed); 'too few rounds': no distribution-free test can reach p < alpha with so "
        "few rounds (2/2^n >= alpha).",
    ]


def _f(x: float | None, fmt: str = ".3g") -> str:
    return "–" if x is None else format(x, fmt)


def details_lines(table: Table) -> list[str]:
    """Per row and arm: n, p, test, cross-check, outliers, CV, drift and warnings."""
    lines = ["| row | arm | n | verdict | p (Holm) | test | Wilcoxon p / HL [interval] | "
             "sd(d) | outlier rounds | drift across run | warnings |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    any_row = False
    for row in table.rows:
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
