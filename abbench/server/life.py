"""What one server life reports about itself: its start-up time (server start to ready,
and the first request's TTFT) as a row, and the system fingerprints its answers carried."""

from __future__ import annotations

from abbench.model.records import At, Record, StartupSample, WorkloadSample
from abbench.model.rows import SERVER_ROW


def startup_sample(base: At, ready_s: object,
                   first_ttft_s: float | None) -> StartupSample | None:
    """The server life's startup sample (row ``server``): ``startup_s`` from the start
    command to the readiness path's first 200, ``first_ttft_ms`` the first request's
    time to first token (the first warm-up request: what a user after a restart
    waits); None when neither was measured."""
    metrics: dict[str, float] = {}
    if isinstance(ready_s, float):
        metrics["startup_s"] = ready_s
    if first_ttft_s is not None:
        metrics["first_ttft_ms"] = first_ttft_s * 1e3
    if not metrics:
        return None
    return StartupSample.model_validate({
        **base, "type": "startup", "workload": SERVER_ROW, "valid": True, "status": "ok",
        "metrics": metrics})


def system_fingerprints(records: list[Record], slot: int) -> list[str]:
    """The distinct ``system_fingerprint`` values (vLLM) this slot's responses carried."""
    out: list[str] = []
    for r in records:
        if isinstance(r, WorkloadSample) and r.slot == slot:
            fp = r.system_fingerprint
            if fp and fp not in out:
                out.append(fp)
    return out
