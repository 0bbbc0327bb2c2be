"""Rounds until confident (``--until-ci``): the campaign's side. After the planned
rounds it looks at the watched cells and adds balanced blocks of rounds until the
stopping rule (:mod:`abbench.stats.stopping`) says stop."""

from __future__ import annotations

import math
from collections.abc import Iterator

from abbench.campaign.progress import Progress
from abbench.config.schema import Config
from abbench.config.stats import StatsConfig
from abbench.model.records import Record
from abbench.model.runmeta import Look, MetaLike, UntilCiState
from abbench.model.schedule import Slot, make_schedule
from abbench.report.table import table_of
from abbench.stats.paired import Comparison
from abbench.stats.stopping import (
    block_size,
    half_width_95,
    look_alphas,
    max_rounds,
    planned_looks,
    report_alpha,
    stop_reason,
)
from abbench.store.run import Run


def watched_comparisons(records: list[Record], meta: MetaLike,
                        settings: StatsConfig) -> list[Comparison | None]:
    """The cells --until-ci watches, with the report's own verdicts: the rows the table
    shows, or every row of ``until_metrics`` when given."""
    table = table_of(records, meta, settings=settings)
    rows = table.rows if settings.until_metrics is None else [
        r for r in table.rows + table.hidden if r.metric in settings.until_metrics]
    return [cell.comparison for row in rows if not row.spec.denominator
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
    planned = run.info().schedule
    done = len({r for r, _pos, _arm in planned})
    next_round = max((r for r, _pos, _arm in planned), default=-1) + 1
    cap = max_rounds(settings, done)
    alpha_k, alpha_end = look_alphas(settings, len(planned_looks(done, cap, len(cfg.arm_names))))
    looks: list[Look] = []
    next_index = len(planned)
    while True:
        meta = run.info()
        records = run.records()
        nominal = watched_comparisons(records, meta, settings)  # their widths
        spent = watched_comparisons(records, meta, settings.model_copy(update={"alpha": alpha_k}))
        reason = stop_reason(nominal, spent, target=target, rounds_done=done, cap=cap)
        widths = [half_width_95(c) for c in nominal if c is not None]
        looks.append(Look(rounds=done, max_half_width=max(widths) if widths else None))
        state = UntilCiState(target=target, max_rounds=cap, alpha_per_look=alpha_k,
                             alpha_report=report_alpha(settings, alpha_k, reason,
                                                       len(looks) - (done >= cap))
                             if reason else alpha_end,
                             looks=looks, stopped=reason)
        if reason is not None:
            run.set_until_ci(state)
            progress.log(f"until-ci: stopped after {done} rounds: {reason}")
            return
        add = min(block_size(done, len(cfg.arm_names)), cap - done)
        block = make_schedule(cfg.arm_names, add, cfg.order, seed, first_round=next_round,
                              first_index=next_index)
        planned = [*run.info().schedule, *((s.round, s.position, s.arm) for s in block)]
        run.set_until_ci(state, schedule=planned)
        progress.log(f"until-ci: widest half-width {_pct(looks[-1].max_half_width)} > "
                     f"{target * 100:g}% after {done} rounds; adding {add}")
        yield from block
        next_index += len(block)
        next_round += add
        done += add


def _pct(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{math.expm1(x) * 100:.2f}%"
