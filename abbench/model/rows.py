"""A table row's identity, apart from how it is labelled (labels are made in report/)."""

from __future__ import annotations

from typing import NamedTuple

#: the row id of a whole-server-life window (peak memory over the life, for instance)
SERVER_ROW = "server"


class RowKey(NamedTuple):
    """What one workload row measures: the row id stored with each sample (e.g.
    ``decode 32K + side calls``), its prompt length and decode length, and whether side
    calls ran beside it. Two workloads of one arms file never share a row id."""

    row: str
    context: int | None = None
    decode_tokens: int | None = None
    side_calls: bool = False
