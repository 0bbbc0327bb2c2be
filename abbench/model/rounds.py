"""Which (arm, round) pairs finished, which failed, which are left: pure functions
of a run's ``run.json`` (schedule) and ``samples.jsonl`` (slot records).

Pinpoint's rule for failures: when one arm of a round fails, the whole round
leaves the comparison (its partner too), so the arms stay paired by round; on
resume the round is run again under a new number, in the same arm order, so the
counts of each arm at each position (AB and BA) stay balanced.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from abbench.model.records import Record, Sample, SlotRecord, WorkloadSample
from abbench.model.rows import RowKey
from abbench.model.runmeta import MetaLike, as_meta
from abbench.model.schedule import Slot

Pair = tuple[str, int]  # (arm, round)


@dataclass(frozen=True)
class RoundsState:
    """What the records say about every scheduled (arm, round) pair."""

    arms: list[str]
    scheduled: list[Slot]
    ok: set[Pair] = field(default_factory=set)
    ok_slots: set[int] = field(default_factory=set)
    failed: dict[Pair, str] = field(default_factory=dict)  # pair -> reason
    reruns: dict[int, int] = field(default_factory=dict)  # failed round -> its re-run

    @property
    def rounds(self) -> list[int]:
        """Scheduled rounds, and any round a slot record names (a run.json without
        a schedule, written by another tool)."""
        return sorted({s.round for s in self.scheduled} | {r for _, r in self.ok}
                      | {r for _, r in self.failed})

    def complete(self) -> list[int]:
        """Rounds where every arm finished."""
        return [r for r in self.rounds if all((a, r) in self.ok for a in self.arms)]

    def failed_rounds(self) -> list[int]:
        """Rounds with a failed pair (left out of the comparison)."""
        return sorted({r for (a, r) in self.failed if (a, r) not in self.ok})

    def unfinished(self) -> list[Slot]:
        """Scheduled slots neither finished nor in a failed round (never run, or cut
        short by an interrupt or by abbench being killed)."""
        dropped = set(self.failed_rounds())
        return [s for s in self.scheduled if (s.arm, s.round) not in self.ok
                and s.round not in dropped]


def read_state(records: Iterable[Record], meta: MetaLike) -> RoundsState:
    info = as_meta(meta)
    state = RoundsState(arms=info.arm_names, scheduled=info.slots(), reruns=dict(info.reruns))
    for rec in records:
        if not isinstance(rec, SlotRecord):
            continue
        pair = (rec.arm, rec.round)
        if rec.ok and rec.slot is not None:
            state.ok.add(pair)
            state.ok_slots.add(rec.slot)
        elif rec.failed:
            state.failed[pair] = rec.reason or "unknown"
    return state


def complete_rounds(records: list[Record], meta: MetaLike) -> list[int]:
    return read_state(records, meta).complete()


def comparable_records(records: list[Record], meta: MetaLike) -> list[Record]:
    """The records the comparison may use: samples of finished server lives in rounds
    that every arm finished. Slot records are all kept (the report lists failures).

    The one definition: the report, ``compare``, the index (so ``history``) and
    ``load_samples`` all take a run's samples through it."""
    state = read_state(records, meta)
    keep = set(state.complete())
    return [rec for rec in records if not isinstance(rec, Sample)
            or (rec.slot in state.ok_slots and rec.round in keep)]


def plan_resume(records: list[Record], meta: MetaLike
                ) -> tuple[list[Slot], dict[int, int]]:
    """The slots a resumed run still has to run, and the failed-round -> re-run map.

    Unfinished slots keep their round and position; each failed round without a
    re-run yet gets one at the end, a new round number in the same arm order.
    New slots are numbered after the scheduled ones.
    """
    state = read_state(records, meta)
    next_index = len(state.scheduled)
    slots: list[Slot] = []
    for s in state.unfinished():
        slots.append(Slot(index=next_index, round=s.round, position=s.position, arm=s.arm))
        next_index += 1
    reruns = dict(state.reruns)
    next_round = max([*state.rounds, *reruns.values()], default=-1) + 1
    for r in state.failed_rounds():
        if r in reruns:
            continue
        order = sorted((s for s in state.scheduled if s.round == r), key=lambda s: s.position)
        for s in order:
            slots.append(Slot(index=next_index, round=next_round, position=s.position,
                              arm=s.arm))
            next_index += 1
        reruns[r] = next_round
        next_round += 1
    return slots, reruns


RoundValues = dict[RowKey, dict[str, dict[int, float]]]


def row_shapes(records: Iterable[Record]) -> tuple[dict[tuple[int | None, str], RowKey],
                                                    dict[str, RowKey]]:
    """What each row id measured, from the workload's own samples: by (server life,
    row id), and by row id alone (its first shape) for records of a life without one."""
    by_life: dict[tuple[int | None, str], RowKey] = {}
    by_id: dict[str, RowKey] = {}
    for rec in records:
        if isinstance(rec, WorkloadSample):
            key = rec.row_key()
            by_life.setdefault((rec.slot, rec.workload), key)
            by_id.setdefault(rec.workload, key)
    return by_life, by_id


def row_key(rec: Sample, metric: str,
            shapes: tuple[dict[tuple[int | None, str], RowKey], dict[str, RowKey]]) -> RowKey:
    """The whole row key of ``rec``'s ``metric``: a collector's window of a workload row
    takes that row's context, decode length and side calls (see :func:`row_shapes`)."""
    if isinstance(rec, WorkloadSample):
        return rec.row_key(metric)
    by_life, by_id = shapes
    shape = by_life.get((rec.slot, rec.workload)) or by_id.get(rec.workload)
    return shape.of(metric) if shape is not None else RowKey(rec.workload, metric)


def round_values(records: list[Record]) -> RoundValues:
    """Row (the whole key) -> arm -> round -> mean of the valid reps."""
    acc: dict[RowKey, dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    shapes = row_shapes(records)
    for rec in records:
        if not isinstance(rec, Sample) or not rec.valid:
            continue
        for metric, value in rec.metrics.items():
            if value is None or not math.isfinite(value):
                continue
            acc[row_key(rec, metric, shapes)][rec.arm][rec.round].append(float(value))
    return {k: {arm: {r: statistics.fmean(v) for r, v in rounds.items()}
                for arm, rounds in by_arm.items()} for k, by_arm in acc.items()}
