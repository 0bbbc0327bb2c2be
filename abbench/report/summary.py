"""The one-line summary under the PR table: per arm, the rows that changed (a metric
over contexts as its range), the rows not decided yet, and how many greedy outputs
differ."""

from __future__ import annotations

from abbench.model.rows import SERVER_ROW
from abbench.report.table import Table
from abbench.report.text import md_escape


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def summary_of(table: Table) -> list[str]:
    """Per arm, the rows that changed: ``decode -35.3% at 32K to -46.2% at 128K ▼``
    (a metric over contexts as its range), then how many greedy outputs differ."""
    out = []
    for arm in table.arms:
        if arm == table.baseline:
            continue
        by_metric: dict[str, list[tuple[str, float, str]]] = {}
        open_rows = []
        for r in table.rows:
            c = r.cells.get(arm)
            comp = c.comparison if c is not None else None
            if comp is not None and comp.verdict in ("inconclusive", "too_few_rounds"):
                open_rows.append(r.label)
            if comp is None or comp.verdict != "changed" or comp.change is None:
                continue
            name = "decode" if r.metric == "decode_tok_s" else r.spec.label
            by_metric.setdefault(name, []).append((r.workload, comp.change, comp.mark))
        parts = []
        for name, items in by_metric.items():
            marks = "".join(sorted({m for _, _, m in items}))
            if len(items) == 1:
                w = items[0][0]
                at = f" at {w.removeprefix('decode ')}" if w != SERVER_ROW else ""
                parts.append(f"{name} {_pct(items[0][1])}{at} {marks}")
                continue
            first, last = items[0], items[-1]
            ends = [w.removeprefix("decode ") for w, _, _ in (first, last)]
            parts.append(f"{name} {_pct(first[1])} at {ends[0]} to {_pct(last[1])} at "
                         f"{ends[1]} {marks}")
        text = ", ".join(parts) or "no row of the table changed beyond the noise band"
        if open_rows:
            text += f" (not decided yet: {', '.join(open_rows)})"
        q = table.quality
        for s in q.sets if q is not None else []:
            for sc in s.comparisons:
                if sc.arm == arm:
                    text += f"; greedy outputs ({s.name}): {len(sc.diffs)} of {sc.compared} " \
                            "prompts differ"
        out.append(f"{table.labels.get(arm, arm)}: {text}")
    return out


def render_summary(table: Table) -> list[str]:
    """The summary as one markdown line (``**Summary**: ...``)."""
    parts = summary_of(table)
    return [f"**Summary** (▲ better, ▼ worse): {md_escape('; '.join(parts))}."] if parts else []
