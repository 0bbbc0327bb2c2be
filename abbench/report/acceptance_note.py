"""The note under the table when speculative-decoding acceptance, not the kernels,
explains a decode difference: per arm and prompt set, acceptance varying more between
rounds than decode speed does."""

from __future__ import annotations

import statistics

from abbench.model.records import Record
from abbench.model.rounds import round_values
from abbench.report.tablemodel import Note

SPEC_PREFIX = "speculative "


def spread(values: list[float]) -> float | None:
    """The between-round coefficient of variation (sd / mean), None below two rounds."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / abs(mean) if mean else None


def acceptance_notes(records: list[Record]) -> list[Note]:
    """One note per (prompt set, arm) whose acceptance rate's between-round spread
    exceeds its decode rate's."""
    values = round_values(records)
    out = []
    for key, by_arm in values.items():
        if key.metric != "spec_accept_rate" or not key.workload.startswith(SPEC_PREFIX):
            continue
        decode = values.get(key.of("decode_tok_s"), {})
        for arm, rounds in by_arm.items():
            acc = spread(list(rounds.values()))
            dec = spread(list(decode.get(arm, {}).values()))
            if acc is None or dec is None or acc <= dec:
                continue
            out.append(Note("acceptance_varies", {"acceptance_cv": acc, "decode_cv": dec},
                            arm=arm, row=key.workload))
    return out
