"""A table row's identity, apart from how it is labelled (labels are made in report/).

A row is what one stored value measures: the row id every sample carries (``workload``
in samples.jsonl: the workload's name or default title plus its context or load level,
e.g. ``decode 32K + side calls``, ``load c=8``), the prompt length, the decode length,
whether side calls ran beside it, and the metric. Two values are of one row only when
the whole key is equal: ``decode 1K`` at 128 decode tokens and ``decode 1K`` at 256 are
two rows (they measure different things), though their row ids read the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: the row id of a whole-server-life window (peak memory over the life, for instance)
SERVER_ROW = "server"


@dataclass(frozen=True)
class RowKey:
    """One row: ``workload`` the stored row id, ``metric`` the metric's name (empty for
    the workload's shape before a metric is named), and what the workload measured."""

    workload: str
    metric: str = ""
    context: int | None = None
    decode_tokens: int | None = None
    side_calls: bool = False

    def of(self, metric: str) -> RowKey:
        """The same workload row, of ``metric``."""
        return replace(self, metric=metric)

    @property
    def shape(self) -> RowKey:
        """The workload row without its metric."""
        return replace(self, metric="")
