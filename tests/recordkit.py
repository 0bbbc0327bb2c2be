"""Synthetic records as a run stores them, for tests that build tables from made-up values."""

from __future__ import annotations

from typing import Any


def lives(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each (arm, round) of ``records`` a server life: a slot number on its records
    and an ok slot record, as the runner writes them. A table keeps only the samples of
    finished lives in rounds every arm finished
    (:func:`abbench.model.rounds.comparable_records`); a pair the records already give a
    slot record keeps that record as it is (a failed life stays failed)."""
    given = {(r["arm"], r["round"]) for r in records if r.get("type") == "slot"}
    slots: dict[tuple[str, int], int] = {}
    out = []
    for r in records:
        pair = (r["arm"], r["round"])
        slot = slots.setdefault(pair, len(slots))
        out.append({**r, "slot": r.get("slot", slot)})
    out += [{"type": "slot", "slot": slot, "arm": arm, "round": rnd, "status": "ok"}
            for (arm, rnd), slot in slots.items() if (arm, rnd) not in given]
    return out
