"""What kind of number each metric is, and which cells test together.

- ``deterministic``: the same build gives the same value every time (memory in MiB,
  token counts, cache-miss counters). Rounds that agree exactly decide at n = 2: they
  carry no sampling error, so such a cell stays outside every multiplicity family.
- ``counted``: a count of requests or items (goodput share, quality passes, failed
  requests). Two rounds can agree by chance, so it is never "exact": the counts are
  tested (:mod:`abbench.stats.counts`).
- ``sampled``: everything timed (tok/s, latencies). Never "exact"; a paired t on the
  rounds' log-ratios.

A metric of the user's own (a collector's ``name:``) is ``sampled`` unless declared here:
the kind that never claims exactness.

The multiplicity family (:func:`family`): the table's shown timed cells, except rows
that mirror another (server timings beside the client's, the device's memory beside the
process tree's), are one family (``table``); its shown counted cells another
(``counts``); hidden rows and mirrors a third ("Also changed", ``also``); exact cells are
in none. How the families share alpha: :func:`abbench.stats.families.adjust`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

Kind = Literal["deterministic", "sampled", "counted"]
Family = Literal["table", "counts", "also"]

_DECLARED: dict[str, Kind] = {
    "peak_vram_mib": "deterministic",
    "device_vram_mib": "deterministic",
    "peak_rss_mib": "deterministic",
    "misses_per_token": "deterministic",
    "quality": "counted",
    "quality_command": "counted",
    "quality_total": "deterministic",
    "quality_command_total": "deterministic",
    "load_goodput": "counted",
    # a property of the trace replayed, the same for every arm
    "trace_designed_hit_rate": "deterministic",
    "load_failed": "counted",
}

#: declared kinds, by metric name (read-only); every other metric is ``sampled``
KINDS: Mapping[str, Kind] = MappingProxyType(_DECLARED)

#: rows that mirror another one (the server's own timings, the device's memory)
MIRRORS: Mapping[str, str] = MappingProxyType({
    "server_decode_tok_s": "decode_tok_s",
    "server_prefill_tok_s": "prefill_tok_s",
    "device_vram_mib": "peak_vram_mib",
})

#: metric-name prefixes of deterministic families (every misses/token source)
_PREFIXES: tuple[tuple[str, Kind], ...] = (("misses_per_token", "deterministic"),)


def kind(metric: str) -> Kind:
    """The kind of ``metric``: declared, by prefix, else ``sampled``."""
    if metric in KINDS:
        return KINDS[metric]
    for prefix, k in _PREFIXES:
        if metric.startswith(prefix):
            return k
    return "sampled"


def family(metric: str, shown: bool) -> Family:
    """The multiplicity family of a (non-exact) cell of ``metric``: for a cell the table
    shows that mirrors no other row, ``counts`` when the metric is counted, else
    ``table``; every other cell ``also``."""
    if not shown or metric in MIRRORS:
        return "also"
    return "counts" if kind(metric) == "counted" else "table"
