"""Text helpers every renderer shares."""

from __future__ import annotations

from abbench.errors import printable
from abbench.model.metrics import MetricSpec


def md_escape(text: str) -> str:
    """Escape text for a markdown table cell: pipes, newlines, HTML, and the brackets
    and backticks of links, images and code (a label loads no image in a PR), control
    characters (none reaches a terminal)."""
    return printable(str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                     .replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")
                     .replace("`", "\\`").replace("\r", " ").replace("\n", " "))


#: what a spreadsheet runs as a formula when a cell starts with it
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A CSV cell no spreadsheet runs: text that starts like a formula gets a leading
    ``'`` (a number, negative ones too, stays a number)."""
    if not isinstance(value, str) or not value.startswith(_FORMULA):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


def fmt_values(sp: MetricSpec, values: list[float]) -> str:
    if not values:
        return "–"
    if len(set(values)) == 1 and len(values) > 1:
        return sp.fmt(values[0])  # every round gave the same value
    if len(values) <= 3:
        return " / ".join(sp.fmt(v) for v in values)
    return f"{sp.fmt(min(values))}-{sp.fmt(max(values))}"
