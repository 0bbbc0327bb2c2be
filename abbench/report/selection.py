"""Which rows the PR table shows (:func:`pick_rows`), and the way back from the words a
user types to a row (:func:`name_rows`)."""

from __future__ import annotations

from collections.abc import Iterable

from abbench.config.stats import TableConfig
from abbench.config.values import format_context
from abbench.errors import ConfigError
from abbench.model.metrics import MetricSpec, spec
from abbench.model.rows import SERVER_ROW, RowKey
from abbench.report.tablemodel import Row, row_label


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def _labels(key: RowKey, sp: MetricSpec) -> tuple[str, str]:
    """A row's label as the table shows it, with and without its unit, folded."""
    label = row_label(key, sp)
    return _fold(label), _fold(label.removesuffix(f" ({sp.unit})" if sp.unit else ""))


#: labels listed when a row is not found, before the rest are counted
MOST_LABELS = 20


def name_rows(texts: Iterable[str], keys: Iterable[RowKey], *, where: str,
              listed: Iterable[str] = ("decode_tok_s",),
              shown: Iterable[RowKey] | None = None) -> list[RowKey]:
    """The rows each of ``texts`` names among ``keys`` (each a row with its metric): a
    row id (``decode 32K``, ``decoder 1K``) names the row of every metric (a key whose
    metric is empty); a label as the table shows it, with or without its unit
    (``decode 32K TTFT (ms)``, ``peak VRAM``), names the row of that metric. Case and
    spaces do not matter. A text that names nothing is refused, listing the labels of the
    rows of the ``listed`` metrics among ``shown`` (default: ``keys``; ``where``: the
    option the text came from)."""
    keys = list(keys)
    shown = keys if shown is None else list(shown)
    out: list[RowKey] = []
    for text in texts:
        want = _fold(text)
        ids = sorted({k.workload for k in keys if _fold(k.workload) == want})
        hits = [RowKey(w) for w in ids] or [k for k in keys
                                            if want in _labels(k, spec(k.metric))]
        if not hits:
            metrics = set(listed)
            labels = sorted({row_label(k, spec(k.metric)) for k in shown
                             if k.metric in metrics} or {k.workload for k in shown})
            more = f", and {len(labels) - MOST_LABELS} more" if len(labels) > MOST_LABELS \
                else ""
            raise ConfigError(f"no row {text!r}", where=where, hint="name one as the table "
                              "labels it (the unit may be left out), or by its row id: "
                              + ", ".join(f"'{x}'" for x in labels[:MOST_LABELS]) + more)
        out += [h for h in hits if h not in out]
    return out


def name_row(text: str, keys: Iterable[RowKey], metric: str | None, *, where: str,
             default: str = "decode_tok_s", shown: Iterable[RowKey] | None = None) -> RowKey:
    """The one row, of one metric, that ``text`` names (:func:`name_rows`), its whole key:
    of ``metric`` when given, else of the metric its label names, else ``default``."""
    keys = [k for k in keys if metric is None or k.metric == metric]
    want = metric or default
    hits: set[RowKey] = set()
    for h in name_rows([text], keys, where=where, listed=[want], shown=shown):
        # a row id: the whole key of each row of that id (two decode lengths are two)
        hits |= {h} if h.metric else ({k for k in keys if k.workload == h.workload
                                        and k.metric == want} or {h.of(want)})
    if len(hits) > 1:
        raise ConfigError(f"{text!r} names {len(hits)} rows", where=where, hint="name one: "
                          + ", ".join(sorted(f"'{row_label(h, spec(h.metric))}'"
                                             for h in hits)))
    return hits.pop()


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


