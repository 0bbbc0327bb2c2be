"""The markdown report: the table people paste into pull requests, then its legend,
notes, quality section and per-row statistics."""

from __future__ import annotations

from abbench.report import quality_text
from abbench.report.setup import render_setup
from abbench.report.summary import render_summary
from abbench.report.table import Row, Table
from abbench.report.text import fmt_values, md_escape
from abbench.report.verdicts import (
    also_changed,
    details_lines,
    legend_lines,
    render_comparison,
    rounds_line,
)


def render_cell(row: Row, arm: str) -> str:
    cell = row.cells.get(arm)
    if row.spec.denominator:
        return quality_text.render_score_cell(row, arm)
    if cell is None:
        return "no data"
    text = fmt_values(row.spec, cell.values)
    if cell.comparison is not None:
        text += " " + render_comparison(cell.comparison)
    return text


def render_markdown(table: Table) -> str:
    lines = [table.header, ""]
    if table.setup is not None:
        lines += [*render_setup(table.setup), ""]
    heads = [md_escape(table.labels[a]) for a in table.arms]
    lines.append("| | " + " | ".join(heads) + " |")
    lines.append("|---|" + "---:|" * len(heads))  # numbers right-aligned
    for row in table.rows:
        cells = [render_cell(row, a) for a in table.arms]
        lines.append(f"| {md_escape(row.label)} | " + " | ".join(cells) + " |")
    lines.append("")
    summary = render_summary(table)
    if summary:
        lines += [*summary, ""]
    extra = also_changed(table)
    if extra:
        lines += [extra, ""]
    lines.extend(legend_lines(table))
    need = rounds_line(table)
    if need:
        lines.append(need)
    if table.invalid:
        parts = ", ".join(f"{md_escape(table.labels[a])}: {n}" for a, n in table.invalid.items())
        lines.append(f"Invalid samples (wrong token count or failed; left out): {parts}.")
    for f in table.failed_slots:
        lines.append(f"Failed: arm {md_escape(f.arm)}, round {f.round}: "
                     f"{md_escape(f.reason or 'unknown')}.")
    lines.extend(table.footer)
    lines.extend(quality_text.render_section(table))
    details = details_lines(table)
    if details:
        lines += ["", "<details><summary>Statistics per row</summary>", "", *details, "",
                  "</details>", ""]  # CommonMark: raw HTML runs on to the next blank line
    for n in table.notes:
        lines.append(n)
    return "\n".join(lines).rstrip() + "\n"
