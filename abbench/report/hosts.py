"""What the report says about the hosts of a gathered campaign, as data
(:class:`Note`): the header's hosts (rounds per host), hosts that disagree with the
others, and each host's own change per table row. :mod:`.markdown` words them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from abbench.model.runmeta import CampaignMeta, RunMeta
from abbench.report.tablemodel import Note
from abbench.stats.blocks import BlockComparison
from abbench.stats.paired import Comparison

#: (row label, arm label, the cell's comparison)
CellRef = tuple[str, str, Comparison | None]


def hosts_note(meta: RunMeta) -> Note | None:
    """The shard runs pooled as blocks: each one's rounds (and its shard's planned
    rounds when fewer ran), host name, machine and CUDA version."""
    if not meta.hosts:
        return None
    camp = meta.campaign or CampaignMeta()
    out = []
    for h in meta.hosts:
        per = camp.rounds_per_shard.get(str(h.shard))
        out.append({"name": h.name, "rounds": h.rounds, "shard": h.shard,
                    "planned": per.planned if per is not None else None,
                    "hostname": str(h.hostname), "machine": h.machine,
                    "cuda": h.fingerprint.cuda})
    return Note("hosts", {"hosts": out, "shards": camp.shards})


def mixed_note(meta: RunMeta) -> list[Note]:
    mixed = meta.campaign.mixed_hosts if meta.campaign is not None else []
    return [Note("hosts_mixed", {"differences": list(mixed)})] if mixed else []


def flag_notes(cells: Sequence[CellRef]) -> list[Note]:
    """One note per host that some cell flags, with the cells and its change there."""
    by_host: dict[str, list[dict[str, Any]]] = {}
    for row, arm, c in cells:
        if not isinstance(c, BlockComparison):
            continue
        others = {h.host: h for h in c.hosts}
        for h in c.hosts:
            if not h.flagged:
                continue
            rest = [o for o in others.values() if o.host != h.host]
            n_rest = sum(o.n for o in rest)
            rest_mean = sum(o.mean * o.n for o in rest) / n_rest if n_rest else math.nan
            by_host.setdefault(h.host, []).append(
                {"row": row, "arm": arm, "change": h.change,
                 "others_change": math.expm1(rest_mean),
                 "z": h.z if h.z is not None and math.isfinite(h.z) else None})
    return [Note("host_disagrees", {"host": host, "cells": items})
            for host, items in by_host.items()]


def per_host_note(cells: Sequence[CellRef]) -> list[Note]:
    """Each host's change (over its own rounds) per table cell."""
    blocks = [(row, arm, c) for row, arm, c in cells if isinstance(c, BlockComparison)]
    if not blocks:
        return []
    hosts: list[str] = []
    out = []
    for row, arm, c in blocks:
        assert isinstance(c, BlockComparison)
        hosts += [h.host for h in c.hosts if h.host not in hosts]
        out.append({"row": row, "arm": arm, "method": c.method,
                    "hosts": {h.host: {"change": h.change, "n": h.n, "flagged": h.flagged}
                              for h in c.hosts}})
    return [Note("per_host", {"hosts": hosts, "cells": out})]
