"""abbench run --resume: what is kept, what runs again, what is refused."""

from __future__ import annotations

from abbench.model.records import Sample, parse_records
from abbench.model.rounds import comparable_records, plan_resume, read_state
from abbench.model.schedule import Slot, position_counts
from abbench.report.markdown import note_text
from abbench.report.notes import fault_notes

ARMS = [{"name": "A"}, {"name": "B"}]
SCHEDULE = [[0, 0, "A"], [0, 1, "B"], [1, 0, "B"], [1, 1, "A"], [2, 0, "A"], [2, 1, "B"],
            [3, 0, "B"], [3, 1, "A"]]


def _slot(i: int, status: str, reason: str | None = None) -> dict:
    r, p, a = SCHEDULE[i]
    return {"type": "slot", "slot": i, "arm": a, "round": r, "position": p, "status": status,
            "reason": reason}


def _sample(i: int, value: float = 10.0) -> dict:
    r, p, a = SCHEDULE[i]
    return {"type": "sample", "slot": i, "arm": a, "round": r, "position": p, "valid": True,
            "workload": "decode 64", "metrics": {"decode_tok_s": value}}


META = {"id": "x", "arms": ARMS, "schedule": SCHEDULE}


def test_plan_keeps_finished_pairs_and_reruns_failed_round_in_its_order() -> None:
    recs = [_slot(0, "ok"), _slot(1, "ok"),               # round 0 done
            _slot(2, "failed", "the server died"),         # round 1: B failed ...
            _slot(3, "ok"),                                # ... A finished
            _slot(4, "ok"), _slot(5, "interrupted")]       # round 2 cut short
    slots_left, reruns = plan_resume(parse_records(recs), META)
    assert reruns == {1: 4}
    assert [(s.index, s.round, s.position, s.arm) for s in slots_left] == [
        (8, 2, 1, "B"),                  # the interrupted pair, same round and position
        (9, 3, 0, "B"), (10, 3, 1, "A"),  # round 3, never started
        (11, 4, 0, "B"), (12, 4, 1, "A"),  # failed round 1 again, as round 4, same order
    ]
    # AB/BA stay balanced: positions of the comparable rounds (0, 2, 3, 4)
    done = [Slot(i, r, p, a) for i, (r, p, a) in enumerate(SCHEDULE) if r != 1]
    counts = position_counts(done + [s for s in slots_left if s.round == 4], ["A", "B"])
    assert counts == {"A": [2, 2], "B": [2, 2]}


def test_a_failed_round_is_run_again_once() -> None:
    recs = [_slot(0, "ok"), _slot(1, "failed", "x")]
    meta_ = {**META, "schedule": SCHEDULE[:2], "reruns": {"0": 1}}
    assert plan_resume(parse_records(recs), meta_) == ([], {0: 1})


def test_comparison_drops_the_failed_pairs_partner() -> None:
    recs = [_slot(0, "ok"), _sample(0), _slot(1, "ok"), _sample(1),
            _sample(2), _slot(2, "failed", "the server died (exit code -9)"),
            _sample(3), _slot(3, "ok"),
            _sample(4), _slot(4, "ok"), _sample(5)]  # slot 5 never finished
    kept = comparable_records(parse_records(recs), META)
    assert sorted(r.slot for r in kept if isinstance(r, Sample)) == [0, 1]
    assert read_state(parse_records(recs), META).complete() == [0]
    notes = [note_text(n) for n in fault_notes(parse_records(recs), META)]
    assert notes[0] == ("Round 1 is left out of the comparison (its pair failed: arm B failed: "
                        "the server died (exit code -9)). `abbench run --resume` runs it again.")
    assert notes[1].startswith("Not run yet (interrupted): B/round 2, B/round 3, A/round 3")


