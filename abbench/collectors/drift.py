"""Drift signals per server life (GPU SM/memory clocks, temperature, power through
NVML; CPU frequency and load through psutil), and the report's warnings when
they differ between arms or drift across the run."""

from __future__ import annotations

import contextlib
import statistics
import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import psutil

from abbench.collectors.base import Collector, base_fields
from abbench.collectors.memory import Nvml, open_nvml
from abbench.collectors.settings import DriftSettings

if TYPE_CHECKING:
    from abbench.runner import SlotContext

#: signal -> (label, unit)
SIGNALS = {
    "gpu_sm_clock_mhz": ("GPU SM clock", "MHz"),
    "gpu_mem_clock_mhz": ("GPU memory clock", "MHz"),
    "gpu_temp_c": ("GPU temperature", "°C"),
    "gpu_power_w": ("GPU power", "W"),
    "cpu_freq_mhz": ("CPU frequency", "MHz"),
    "cpu_load_1m": ("CPU load (1 min)", ""),
    "cpu_percent": ("CPU busy", "%"),
}


def read_signals(nvml: Nvml | None) -> dict[str, float]:
    """One reading of every signal this machine offers (missing ones are left out)."""
    out: dict[str, float] = {}
    if nvml is not None:
        m = nvml.mod
        readers = {
            "gpu_sm_clock_mhz": lambda h: m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_SM),
            "gpu_mem_clock_mhz": lambda h: m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_MEM),
            "gpu_temp_c": lambda h: m.nvmlDeviceGetTemperature(h, m.NVML_TEMPERATURE_GPU),
            "gpu_power_w": lambda h: m.nvmlDeviceGetPowerUsage(h) / 1000.0,
        }
        for key, read in readers.items():
            vals = []
            for h in nvml.handles:
                with contextlib.suppress(Exception):
                    vals.append(float(read(h)))
            if vals:
                out[key] = statistics.fmean(vals)
    with contextlib.suppress(Exception):
        f = psutil.cpu_freq()
        if f is not None and f.current:
            out["cpu_freq_mhz"] = float(f.current)
    with contextlib.suppress(Exception):
        out["cpu_load_1m"] = float(psutil.getloadavg()[0])
    with contextlib.suppress(Exception):
        out["cpu_percent"] = float(psutil.cpu_percent(interval=None))
    return out


class DriftCollector(Collector):
    name = "drift"

    def __init__(self, settings: DriftSettings):
        self.settings = settings
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Nvml | None = None
        self._readings: list[dict[str, float]] = []
        self._why: str | None = None

    def begin_server(self, ctx: SlotContext) -> None:
        self.close()
        self._nvml, self._why = open_nvml(None, ctx.arm.env)
        self._readings = []
        self._stop = threading.Event()
        psutil.cpu_percent(interval=None)  # primes the busy-time counter
        self._readings.append(read_signals(self._nvml))

        def loop() -> None:
            while not self._stop.wait(self.settings.period_s):
                if not ctx.server.alive():
                    break
                self._readings.append(read_signals(self._nvml))

        self._thread = threading.Thread(target=loop, name="abbench-drift", daemon=True)
        self._thread.start()

    def end_server(self, ctx: SlotContext) -> None:
        if self._thread is None:
            return
        self._readings.append(read_signals(self._nvml))
        readings = list(self._readings)
        self.close()
        signals: dict[str, dict[str, float]] = {}
        for key in SIGNALS:
            vals = [r[key] for r in readings if key in r]
            if vals:
                signals[key] = {"mean": statistics.fmean(vals), "min": min(vals),
                                "max": max(vals), "n": len(vals)}
        rec: dict[str, Any] = {**base_fields(ctx), "type": "drift", "signals": signals,
                               "period_s": self.settings.period_s,
                               "warn_pct": self.settings.warn_pct}
        if self._why:
            rec["gpu_unavailable"] = self._why
        ctx.record(rec)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._nvml is not None:
            self._nvml.shutdown()
            self._nvml = None


# ------------------------------------------------------------------ reporting


def _pct(a: float, b: float) -> float:
    ref = max(abs(a), abs(b))
    return 0.0 if ref == 0 else abs(a - b) / ref * 100


def drift_report(records: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(detail lines: a table of each signal's per-round mean by arm, warnings)."""
    drift = [r for r in records if r.get("type") == "drift"]
    if not drift:
        return [], []
    warn_pct = float(drift[0].get("warn_pct", 5.0))
    by: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in drift:
        for key, s in (r.get("signals") or {}).items():
            by[key][r["arm"]][int(r["round"])] = float(s["mean"])
    arms = list(dict.fromkeys(r["arm"] for r in drift))
    rounds = sorted({int(r["round"]) for r in drift})
    lines = ["| signal | arm | " + " | ".join(f"r{n}" for n in rounds) + " |",
             "|---|---|" + "---|" * len(rounds)]
    warnings: list[str] = []
    for key, per_arm in by.items():
        label, unit = SIGNALS.get(key, (key, ""))
        head = f"{label} ({unit})" if unit else label
        for arm in arms:
            vals = per_arm.get(arm, {})
            cells = [f"{vals[n]:.1f}" if n in vals else "–" for n in rounds]
            lines.append(f"| {head} | {arm} | " + " | ".join(cells) + " |")
        # load follows our own work: only big gaps count
        tol = max(warn_pct, 25.0) if key in ("cpu_load_1m", "cpu_percent") else warn_pct
        means = {a: statistics.fmean(v.values()) for a, v in per_arm.items() if v}
        if len(means) > 1:
            hi, lo = max(means, key=means.__getitem__), min(means, key=means.__getitem__)
            gap = _pct(means[hi], means[lo])
            if gap > tol:
                warnings.append(f"Warning: {label} differs between arms by {gap:.0f}% "
                                f"({hi} {means[hi]:.1f} vs {lo} {means[lo]:.1f} {unit}).")
        per_round = defaultdict(list)
        for v in per_arm.values():
            for n, x in v.items():
                per_round[n].append(x)
        if len(per_round) > 1:
            seq = [statistics.fmean(per_round[n]) for n in sorted(per_round)]
            change = _pct(seq[0], seq[-1])
            if change > tol:
                warnings.append(f"Warning: {label} drifted across the run by {change:.0f}% "
                                f"(first round {seq[0]:.1f}, last {seq[-1]:.1f} {unit}).")
    return lines, warnings


def collector_notes(records: list[dict[str, Any]]) -> list[str]:
    """Lines for the end of the report: unavailable metrics, sampling periods, drift."""
    out: list[str] = []
    why: dict[str, set[str]] = defaultdict(set)
    periods: set[float] = set()
    for r in records:
        if r.get("type") != "sample" or "collector" not in r:
            continue
        for metric, reason in (r.get("unavailable") or {}).items():
            why[metric].add(reason)
        if r.get("period_ms") is not None and r.get("metrics"):
            periods.add(float(r["period_ms"]))
    for metric, reasons in why.items():
        out.append(f"Unavailable: {metric}: {'; '.join(sorted(reasons))}.")
    flushes = [r for r in records if r.get("type") == "flush"]
    failed = [r for r in flushes if not r.get("ok")]
    if flushes:
        out.append(f"Cache flushes: {len(flushes) - len(failed)} of {len(flushes)} succeeded"
                   + (f" (failed: {failed[0].get('reason')})." if failed else "."))
    if periods:
        out.append("Memory peaks: sampled every " + ", ".join(f"{p:g}" for p in
                   sorted(periods)) + " ms over the server's whole process tree; spikes "
                   "shorter than that can be missed.")
    lines, warnings = drift_report(records)
    out.extend(warnings)
    if lines:
        out += ["", "<details><summary>Drift signals (mean per server life)</summary>", "",
                *lines, "", "</details>"]
    return out
