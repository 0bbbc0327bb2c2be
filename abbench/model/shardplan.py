"""Shards: a campaign's rounds split over hosts, whole rounds per host.

A shard is one host running whole rounds of every arm, interleaved as on one host.
Shard ``i`` takes a contiguous stretch of the campaign's rounds; their arm orders are
the campaign's own (the Latin blocks of :mod:`abbench.model.schedule`, drawn with the
campaign's seed), so the shards together are as balanced as one host's campaign, and
a shard that holds whole blocks (a multiple of the number of arms, which the split
prefers) is balanced by itself. Each shard has its own seed, derived from the
campaign's, for what the runner draws inside a round (prompt nonces, nonce prompt sets).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from abbench.model.schedule import Order, Slot, make_schedule


@dataclass(frozen=True)
class ShardPlan:
    """Shard ``index``: rounds ``first_round .. first_round + rounds - 1`` of the campaign."""

    index: int
    first_round: int
    rounds: int
    seed: int

    @property
    def round_numbers(self) -> list[int]:
        return list(range(self.first_round, self.first_round + self.rounds))


def shard_seed(seed: int, index: int) -> int:
    """Shard ``index``'s seed: SHA-256 of the campaign's seed and the index, in 1..2^31-1."""
    digest = hashlib.sha256(f"abbench-shard:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**31 - 1) + 1


def split_rounds(rounds: int, shards: int, n_arms: int) -> list[int]:
    """Rounds per shard, as even as possible, in whole Latin blocks of ``n_arms`` rounds
    where there are at least as many blocks as shards (the rounds left over go one each
    to the first shards); an even split otherwise."""
    if shards < 1:
        raise ValueError("at least one shard")
    if rounds < shards:
        raise ValueError(f"{shards} shards need at least {shards} rounds (one each), "
                         f"not {rounds}")
    blocks, rest = divmod(rounds, n_arms)
    if n_arms > 1 and blocks >= shards:
        q, r = divmod(blocks, shards)
        sizes = [(q + (i < r)) * n_arms for i in range(shards)]
        for i in range(rest):
            sizes[i % shards] += 1
        return sizes
    q, r = divmod(rounds, shards)
    return [q + (i < r) for i in range(shards)]


def plan_shards(n_arms: int, rounds: int, shards: int, seed: int) -> list[ShardPlan]:
    """The shards of a campaign of ``rounds`` rounds (see :func:`split_rounds`)."""
    plans, first = [], 0
    for i, n in enumerate(split_rounds(rounds, shards, n_arms)):
        plans.append(ShardPlan(i, first, n, shard_seed(seed, i)))
        first += n
    return plans


def shard_schedule(arms: list[str], plan: ShardPlan, order: Order, campaign_seed: int,
                   rounds: list[int] | None = None) -> list[Slot]:
    """The slots of the shard, in execution order, numbered from 0; rounds keep the
    campaign's numbers and orders. ``rounds``: only these of the shard's rounds."""
    want = set(plan.round_numbers if rounds is None else rounds)
    slots = [s for s in make_schedule(arms, plan.rounds, order, campaign_seed,
                                      first_round=plan.first_round) if s.round in want]
    return [Slot(index=i, round=s.round, position=s.position, arm=s.arm)
            for i, s in enumerate(slots)]
