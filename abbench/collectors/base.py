"""What every collector shares: the interface, the record it writes, the window's samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from abbench.config.arms import ResolvedArm
from abbench.model.records import At, CollectorSample, Stored, WorkloadSample, at
from abbench.slot import SlotContext


def base_fields(ctx: SlotContext) -> At:
    return at(ctx.slot)


def record_window(ctx: SlotContext, *, collector: str, window: str, workload: str,
                  metrics: dict[str, float], unavailable: dict[str, str] | None = None,
                  **detail: Any) -> None:
    """One sample record of a collector's window: a row in the report when ``metrics``
    holds values; ``unavailable`` says which metrics could not be measured, and why
    (never a 0 in their place)."""
    more: dict[str, object] = {"unavailable": unavailable} if unavailable else {}
    ctx.record(CollectorSample.model_validate({
        **base_fields(ctx), "type": "sample", "valid": True, "status": "ok",
        "workload": workload, "collector": collector, "window": window, "metrics": metrics,
        **more, **detail}))


@dataclass
class WindowState:
    """What a collector noted when a window opened."""

    row: str
    data: dict[str, Any] = field(default_factory=dict)


class Collector:
    """One configured collector. Hooks are no-ops unless overridden."""

    name = "collector"

    def check(self, arm: ResolvedArm) -> list[str]:
        """Before any server starts: raise ConfigError when this collector can never
        measure with ``arm`` (its preset lacks what it reads); return warnings."""
        return []

    def begin_server(self, ctx: SlotContext) -> None:
        """The server is ready (before warm-up)."""

    def end_server(self, ctx: SlotContext) -> None:
        """The workloads are done; the server still runs."""

    def close(self) -> None:
        """Release threads and handles; called however the slot ended."""

    def begin_window(self, ctx: SlotContext, row: str) -> WindowState | None:
        return None

    def end_window(self, ctx: SlotContext, state: WindowState) -> None:
        """Measure and record the window opened by :meth:`begin_window`."""


def window_samples(ctx: SlotContext, row: str) -> list[WorkloadSample]:
    """The workload's own sample records of this slot and row (not collectors')."""
    return [r for r in ctx.records() if isinstance(r, WorkloadSample)
            and r.slot == ctx.slot.index and r.workload == row]


def decoded_tokens(samples: list[WorkloadSample]) -> int:
    """Tokens the client received in these samples, side calls included."""
    n = 0
    for r in samples:
        n += r.completion_tokens or 0
        for side in r.side_calls or ():
            n += side.completion_tokens or 0
    return n


def dig(obj: Any, path: str) -> Any:
    """``dig(rec, "usage.prompt_tokens_details.cached_tokens")``; None when absent."""
    if isinstance(obj, Stored):
        obj = obj.data()
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj
