"""Round order: which arm starts when.

``interleaved`` (the default) gives every round a fresh random order, balanced so
that each arm takes each position equally often: rounds are drawn in blocks of
``len(arms)`` from a Latin square (rows and columns shuffled with the seed), so
after every complete block the positions are exactly balanced. ``alternate`` is
ABAB.. (the same order every round), ``sequential`` runs all rounds of A, then
all of B (only to show why not).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

Order = Literal["interleaved", "alternate", "sequential"]


@dataclass(frozen=True)
class Slot:
    """One server life: ``arm`` started fresh in ``round`` at ``position``."""

    index: int
    round: int
    position: int
    arm: str


def _latin_block(arms: list[str], rng: random.Random) -> list[list[str]]:
    n = len(arms)
    rows = list(range(n))
    cols = list(range(n))
    rng.shuffle(rows)
    rng.shuffle(cols)
    perm = list(arms)
    rng.shuffle(perm)
    return [[perm[(r + c) % n] for c in cols] for r in rows]


def round_orders(arms: list[str], rounds: int, order: Order, seed: int,
                 first_round: int = 0) -> list[list[str]]:
    """The arm order of each round ``first_round .. first_round + rounds - 1``.

    Deterministic in (arms, order, seed, round index): extending a schedule with
    more rounds later keeps the earlier rounds' order.
    """
    if len(arms) < 1:
        raise ValueError("no arms")
    out: list[list[str]] = []
    for r in range(first_round, first_round + rounds):
        if order == "alternate":
            out.append(list(arms))  # ABAB..: the same order every round
        elif order == "sequential":
            out.append(list(arms))  # flattened arm-major below
        else:
            block, within = divmod(r, len(arms))
            rng = random.Random(f"{seed}:{block}")
            out.append(_latin_block(arms, rng)[within])
    return out


def make_schedule(arms: list[str], rounds: int, order: Order, seed: int,
                  first_round: int = 0, first_index: int = 0) -> list[Slot]:
    """The slots of ``rounds`` rounds, in execution order."""
    if order == "sequential":
        slots = []
        i = first_index
        for pos, arm in enumerate(arms):
            for r in range(first_round, first_round + rounds):
                slots.append(Slot(index=i, round=r, position=pos, arm=arm))
                i += 1
        return slots
    slots = []
    i = first_index
    for k, arm_order in enumerate(round_orders(arms, rounds, order, seed, first_round)):
        for pos, arm in enumerate(arm_order):
            slots.append(Slot(index=i, round=first_round + k, position=pos, arm=arm))
            i += 1
    return slots


def position_counts(slots: list[Slot], arms: list[str]) -> dict[str, list[int]]:
    """How often each arm ran at each position within its round."""
    counts = {a: [0] * len(arms) for a in arms}
    for s in slots:
        counts[s.arm][s.position] += 1
    return counts


def new_seed() -> int:
    return random.SystemRandom().randrange(1, 2**31)
