"""Rounds until confident (``--until-ci``): after the planned rounds, add balanced
blocks of rounds until every watched interval is narrow enough, every watched
cell has a verdict, or the cap is reached.

The stop rule cannot inflate false "changed": a stop on width alone does not
depend on where the estimate lies, and a stop on verdicts needs every watched
cell decided at alpha / K (Bonferroni across the K looks the cap allows).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from abbench.schedule import Slot, make_schedule
from abbench.stats import Comparison, StatsConfig

if TYPE_CHECKING:
    from abbench.config import Config
    from abbench.progress import Progress
    from abbench.store import Run


def block_size(rounds_done: int, n_arms: int) -> int:
    """Rounds to add next: up to the end of the current Latin block, so that arm
    positions stay balanced after every look."""
    return n_arms - rounds_done % n_arms


def max_rounds(settings: StatsConfig, first_rounds: int) -> int:
    """The cap: ``max_rounds``, else 4 x the planned rounds (at least 12)."""
    return settings.max_rounds or max(12, 4 * first_rounds)


def planned_looks(first_rounds: int, cap: int, n_arms: int) -> list[int]:
    """The rounds after which the stop rule looks, from the first rounds to the cap."""
    looks = [first_rounds]
    while looks[-1] < cap:
        looks.append(min(cap, looks[-1] + block_size(looks[-1], n_arms)))
    return looks


def look_alpha(settings: StatsConfig, k_looks: int) -> float:
    return settings.alpha / max(1, k_looks)


def stop_reason(nominal: Sequence[Comparison | None], spent: Sequence[Comparison | None], *,
                target: float, rounds_done: int, cap: int) -> str | None:
    """Why to stop after this look, or None to add a block.

    ``nominal``: the watched cells' comparisons at alpha (their widths);
    ``spent``: the same at the per-look alpha (their verdicts).
    """
    if not nominal or any(c is None for c in nominal):
        return "no paired rounds to compare yet" if rounds_done >= cap else None
    widths = [c.half_width for c in nominal if c is not None]
    if all(w is not None and w <= math.log1p(target) for w in widths):
        return f"every watched interval's half-width is at or under {target * 100:g}%"
    if spent and all(c is not None and c.verdict in ("changed", "within_noise") for c in spent):
        return "every watched cell has a verdict at the per-look alpha"
    if rounds_done >= cap:
        return f"the cap of {cap} rounds was reached"
    return None


def watched_comparisons(records: list[dict[str, Any]], meta: dict[str, Any],
                        settings: StatsConfig) -> list[Comparison | None]:
    from abbench.report import build_table
    from abbench.stats import watched

    table = build_table(records, meta, settings=settings)
    return [cell.comparison for row in table.rows if watched(row.spec, settings)
            for arm, cell in row.cells.items() if arm != table.baseline]


def planned_and_more(cfg: Config, run: Run, schedule: list[Slot], seed: int,
                     progress: Progress) -> Iterator[Slot]:
    """The planned slots; then, with ``stats.until_ci``, balanced blocks of rounds
    until :func:`stop_reason` says stop. Each look is recorded in run.json."""
    settings = cfg.stats
    run.update_meta(stats=settings.model_dump(mode="json"))
    yield from schedule
    target = settings.until_ci
    if target is None:
        return
    # The whole stored schedule, not just the slots run now (a resumed run passes only
    # what was left): new blocks must follow every round and slot index ever planned.
    planned = run.meta()["schedule"]
    done = len({r for r, _pos, _arm in planned})
    next_round = max((r for r, _pos, _arm in planned), default=-1) + 1
    cap = max_rounds(settings, done)
    alpha_k = look_alpha(settings, len(planned_looks(done, cap, len(cfg.arm_names))))
    looks: list[dict[str, Any]] = []
    next_index = len(planned)
    while True:
        meta = run.meta()
        records = run.records()
        nominal = watched_comparisons(records, meta, settings)
        spent = watched_comparisons(records, meta, settings.model_copy(update={"alpha": alpha_k}))
        reason = stop_reason(nominal, spent, target=target, rounds_done=done, cap=cap)
        widths = [c.half_width for c in nominal if c is not None and c.half_width is not None]
        looks.append({"rounds": done, "max_half_width": max(widths) if widths else None})
        state = {"target": target, "max_rounds": cap, "alpha_per_look": alpha_k,
                 "looks": looks, "stopped": reason}
        if reason is not None:
            run.update_meta(until_ci=state)
            progress.log(f"until-ci: stopped after {done} rounds: {reason}")
            return
        add = min(block_size(done, len(cfg.arm_names)), cap - done)
        block = make_schedule(cfg.arm_names, add, cfg.order, seed, first_round=next_round,
                              first_index=next_index)
        run.update_meta(until_ci=state,
                        schedule=meta["schedule"] + [[s.round, s.position, s.arm]
                                                     for s in block])
        progress.log(f"until-ci: widest half-width {_pct(looks[-1]['max_half_width'])} > "
                     f"{target * 100:g}% after {done} rounds; adding {add}")
        yield from block
        next_index += len(block)
        next_round += add
        done += add


def _pct(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{math.expm1(x) * 100:.2f}%"


def with_stats(cfg: Config, **changes: Any) -> Config:
    """``cfg`` with ``stats`` fields overridden (CLI options); None leaves a field."""
    from pydantic import ValidationError

    from abbench.errors import ConfigError

    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        return cfg
    try:
        stats = StatsConfig.model_validate({**cfg.stats.model_dump(), **changes})
    except ValidationError as e:
        msg = "; ".join(f"{'.'.join(map(str, er['loc']))}: {er['msg']}" for er in e.errors())
        raise ConfigError(msg, where="command line",
                          hint="write percentages like --until-ci 1% (or 0.01)") from None
    return cfg.model_copy(update={"stats": stats})
