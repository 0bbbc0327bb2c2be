"""Which rows the PR table shows (:func:`pick_rows`), and the way back from the words a
user types to a row (:func:`find_rows`)."""

from __future__ import annotations

from abbench.config.stats import TableConfig
from abbench.config.values import format_context
from abbench.model.rows import SERVER_ROW, RowKey
from abbench.report.tablemodel import Row


def find_rows(rows: list[Row], text: str, metric: str | None = None) -> list[Row]:
    """The rows ``text`` names: a row id (``decode 32K``) or a label as the table shows
    it, with or without its unit (``decode 32K TTFT (ms)``, ``decode 32K TTFT``), case
    and surrounding spaces ignored; of ``metric`` when given."""
    want = " ".join(text.split()).casefold()

    def names(r: Row) -> set[str]:
        unit = f" ({r.spec.unit})" if r.spec.unit else ""
        label = r.label
        return {r.workload.casefold(), label.casefold(),
                label.removesuffix(unit).casefold()}

    return [r for r in rows if (metric is None or r.metric == metric) and want in names(r)]


MISSES = "misses_per_token"  # the preferred misses/token source; others are its variants


def _memory_metric(rows: list[Row]) -> str:
    """peak VRAM where any was measured, else the process tree's peak RSS."""
    return "peak_vram_mib" if any(r.metric == "peak_vram_mib" for r in rows) else "peak_rss_mib"


def _same_as(row: Row, other: Row | None) -> bool:
    return other is not None and all(
        c.rounds == o.rounds and c.values == o.values
        for a, c in row.cells.items() for o in [other.cells.get(a)] if o is not None) \
        and row.cells.keys() == other.cells.keys()


def title(row: Row) -> str:
    """The workload a row belongs to, without its context: ``decode + side calls``."""
    if row.key.context is None:
        return row.workload
    return row.workload.replace(f" {format_context(row.key.context)}", "", 1)


def pick_rows(rows: list[Row], cfg: TableConfig) -> list[Row]:
    """The PR table's rows: each family (or metric name) of ``cfg.metrics`` in turn.

    Peak memory shows once per server life, and per workload only where that
    workload's peak differs from the life's; misses/token shows one source
    (``misses_per_token`` first, then the others by name) at each workload's longest
    context, where the cache is under most pressure (the other contexts stay in the
    details and, when changed, under the table)."""
    memory = _memory_metric(rows)
    server = {r.metric: r for r in rows if r.workload == SERVER_ROW}
    source: dict[RowKey, str] = {}  # workload row -> its one misses/token source
    longest: dict[str, Row] = {}  # workload title -> its longest-context misses row
    for r in rows:
        if r.metric.startswith(MISSES):
            have = source.get(r.key.shape)
            if have is None or (r.metric == MISSES or (have != MISSES and r.metric < have)):
                source[r.key.shape] = r.metric
    for r in rows:
        if source.get(r.key.shape) == r.metric:
            t = title(r)
            if t not in longest or (r.key.context or 0) > (longest[t].key.context or 0):
                longest[t] = r
    misses = {id(r) for r in longest.values()}
    named = {"decode_tok_s", "ttft_ms", "prefill_tok_s", "side_call_ms"}

    def family(name: str, r: Row) -> bool:
        if name in named:
            return r.metric == name
        if name == "vram":
            return r.metric == memory and (r.workload == SERVER_ROW
                                           or not _same_as(r, server.get(memory)))
        if name == "misses":
            return id(r) in misses
        if name == "quality":
            return r.spec.denominator is not None
        if name == "other":
            return r.spec.table and r.metric not in named and r.spec.denominator is None \
                and not r.metric.startswith(MISSES) and r.metric not in (
                    "peak_vram_mib", "peak_rss_mib", "device_vram_mib")
        return r.metric == name

    out: list[Row] = []
    taken: set[int] = set()
    for name in cfg.metrics:
        for r in rows:
            if id(r) not in taken and family(name, r):
                out.append(r)
                taken.add(id(r))
    return out


