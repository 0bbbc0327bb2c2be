from __future__ import annotations

import pytest

from abbench.model.schedule import make_schedule, position_counts, round_orders


@pytest.mark.parametrize("arms", [["A", "B"], ["A", "B", "C"], list("ABCDE")])
@pytest.mark.parametrize("seed", [1, 2, 99])
def test_interleaved_is_balanced_after_each_block(arms, seed):
    n = len(arms)
    slots = make_schedule(arms, 4 * n, "interleaved", seed)
    counts = position_counts(slots, arms)
    assert all(c == [4] * n for c in counts.values())
    for r in range(4 * n):  # every round runs every arm once
        assert sorted(s.arm for s in slots if s.round == r) == sorted(arms)


def test_interleaved_is_seeded_and_reproducible():
    a = make_schedule(["A", "B", "C"], 6, "interleaved", 5)
    assert a == make_schedule(["A", "B", "C"], 6, "interleaved", 5)
    orders = {tuple(tuple(o) for o in round_orders(["A", "B", "C"], 6, "interleaved", s))
              for s in range(20)}
    assert len(orders) > 10  # the seed matters


def test_extending_keeps_earlier_rounds():
    first = round_orders(["A", "B"], 4, "interleaved", 3)
    longer = round_orders(["A", "B"], 8, "interleaved", 3)
    assert longer[:4] == first
    more = make_schedule(["A", "B"], 4, "interleaved", 3, first_round=4, first_index=8)
    assert [s.round for s in more] == [4, 4, 5, 5, 6, 6, 7, 7]
    assert [s.index for s in more] == list(range(8, 16))


def test_alternate_and_sequential():
    alt = make_schedule(["A", "B"], 3, "alternate", 0)
    assert [s.arm for s in alt] == ["A", "B"] * 3
    seq = make_schedule(["A", "B"], 3, "sequential", 0)
    assert [s.arm for s in seq] == ["A"] * 3 + ["B"] * 3
    assert [s.round for s in seq] == [0, 1, 2, 0, 1, 2]
