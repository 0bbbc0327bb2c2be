"""The runner's side of collectors: two slot tasks per campaign (one opens the
server-life window before warm-up, one closes it after the workloads) and the
per-workload window hook that :meth:`abbench.campaign.runner.Campaign.serve` enters
around each workload row's reps."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from abbench import registry
from abbench.collectors.base import Collector, WindowState
from abbench.config.arms import resolve_arms
from abbench.config.collectors import CollectorSettings
from abbench.config.schema import Config
from abbench.errors import ConfigError
from abbench.slot import SlotContext, SlotTask


def make_collector(s: CollectorSettings) -> Collector:
    """The collector registered for ``s.kind`` (abbench.collectors entry points)."""
    factory = registry.load("abbench.collectors", s.kind)
    collector = factory(s)
    if not isinstance(collector, Collector):
        raise ConfigError(f"the abbench.collectors entry {s.kind!r} made a "
                          f"{type(collector).__name__}, not a Collector",
                          hint="subclass abbench.collectors.base.Collector")
    return collector


class ServerLifeBegin:
    """Cold task: every collector's server-life window opens (before warm-up)."""

    name = "collectors: begin"
    cold = True

    def __init__(self, collectors: list[Collector]):
        self.collectors = collectors

    def check(self, cfg: Config) -> list[str]:
        """Every collector against every arm, before any server starts."""
        warnings: list[str] = []
        src = cfg.source or "arms file"
        for i, (c, s) in enumerate(zip(self.collectors, cfg.collectors, strict=True)):
            for arm in resolve_arms(cfg):
                try:
                    warnings += c.check(arm)
                except ConfigError as e:
                    raise ConfigError(f"arm {arm.name}: {e.message}",
                                      where=f"{src}: collectors[{i}] ({s.kind})",
                                      hint=e.hint) from None
        return warnings

    def run(self, ctx: SlotContext) -> None:
        for c in self.collectors:
            c.close()  # whatever a failed slot left behind
            c.begin_server(ctx)

    @contextlib.contextmanager
    def workload_window(self, ctx: SlotContext, row: str) -> Iterator[None]:
        states: list[tuple[Collector, WindowState]] = []
        for c in self.collectors:
            st = c.begin_window(ctx, row)
            if st is not None:
                states.append((c, st))
        yield  # an exception (a dead server) skips the recording
        for c, st in states:
            c.end_window(ctx, st)


class ServerLifeEnd:
    """Warm task: every collector's server-life window closes and is recorded."""

    name = "collectors: end"
    cold = False

    def __init__(self, collectors: list[Collector]):
        self.collectors = collectors

    def run(self, ctx: SlotContext) -> None:
        for c in self.collectors:
            c.end_server(ctx)


def collector_tasks(cfg: Config) -> list[SlotTask]:
    """The two tasks for ``cfg.collectors`` (none when no collector is configured)."""
    collectors = [make_collector(s) for s in cfg.collectors]
    if not collectors:
        return []
    return [ServerLifeBegin(collectors), ServerLifeEnd(collectors)]


@contextlib.contextmanager
def workload_window(tasks: Sequence[SlotTask], ctx: SlotContext, row: str) -> Iterator[None]:
    """Enter every task's per-workload window around one workload row's reps."""
    with contextlib.ExitStack() as stack:
        for t in tasks:
            hook = getattr(t, "workload_window", None)
            if hook is not None:
                stack.enter_context(hook(ctx, row))
        yield
