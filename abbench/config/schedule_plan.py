"""The schedule an arms file asks for, and the seed it was drawn with."""

from __future__ import annotations

from abbench.config.schema import Config
from abbench.model.schedule import Slot, make_schedule, new_seed


def plan(cfg: Config, *, rounds: int | None = None, seed: int | None = None
         ) -> tuple[list[Slot], int]:
    """The schedule and the seed it was drawn with (drawn now when not given)."""
    seed = seed if seed is not None else (cfg.seed if cfg.seed is not None else new_seed())
    return make_schedule(cfg.arm_names, rounds or cfg.rounds, cfg.order, seed), seed
