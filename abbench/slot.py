"""What one server life offers the steps that run inside it.

A :class:`SlotTask` (a collector's window, a quality check, the fingerprint pass)
sees a :class:`SlotContext`: the live server and its client, and where to record.
It sits below collectors and quality and above server and workload, so neither
side needs the campaign that drives them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from abbench.config.arms import ResolvedArm
from abbench.config.schema import Config
from abbench.model.records import Record
from abbench.model.schedule import Slot
from abbench.server.process import Server
from abbench.workload.decode import Client


@dataclass
class SlotContext:
    """What a slot task sees: the live server, its client, where to record."""

    cfg: Config
    arm: ResolvedArm
    slot: Slot
    server: Server
    client: Client
    #: the run folder (quality commands keep their output under it)
    run_dir: Path
    #: the run's order seed (nonce prompt sets derive theirs from it)
    run_seed: int
    #: append one record to samples.jsonl (flushed before it returns)
    record: Callable[[Record], None]
    #: every record stored so far
    records: Callable[[], list[Record]]
    stop_event: threading.Event
    #: the workload rows whose window opened with the prefix cache emptied (the flush
    #: collector): a cold replay's first rep there needs no flush of its own
    flushed: set[str] = field(default_factory=set)


class SlotTask(Protocol):
    """An extra step in every server life (quality checks, fingerprints, collectors).

    ``cold`` tasks run right after the server is ready, before warm-up; the others
    after the workloads. Time spent in ``run`` counts as measurement, not overhead.
    A task may also have ``check(cfg) -> list[str]``: called by ``validate`` and ``run``
    before any server starts, it raises ConfigError or returns warnings.
    """

    name: str
    cold: bool

    def run(self, ctx: SlotContext) -> None: ...
