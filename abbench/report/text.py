"""Text helpers every renderer shares."""

from __future__ import annotations

from abbench.model.metrics import MetricSpec


def md_escape(text: str) -> str:
    """Escape text for a markdown table cell: pipes, newlines, HTML."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|").replace("\r", " ").replace("\n", " "))


def fmt_values(sp: MetricSpec, values: list[float]) -> str:
    if not values:
        return "–"
    if len(set(values)) == 1 and len(values) > 1:
        return sp.fmt(values[0])  # every round gave the same value
    if len(values) <= 3:
        return " / ".join(sp.fmt(v) for v in values)
    return f"{sp.fmt(min(values))}-{sp.fmt(max(values))}"
