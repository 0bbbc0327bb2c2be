"""Drift signals per server life (GPU SM/memory clocks, temperature, power through
NVML; CPU frequency and load through psutil), and the report's warnings when
they differ between arms or drift across the run."""

from __future__ import annotations

import contextlib
import statistics
import threading

import psutil

from abbench.collectors.base import Collector, base_fields
from abbench.collectors.memory import Nvml, open_nvml
from abbench.config.collectors import DriftSettings
from abbench.model.records import DriftRecord
from abbench.slot import SlotContext

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
        more = {"gpu_unavailable": self._why} if self._why else {}
        ctx.record(DriftRecord(**base_fields(ctx), signals=signals,
                               period_s=self.settings.period_s,
                               warn_pct=self.settings.warn_pct, **more))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._nvml is not None:
            self._nvml.shutdown()
            self._nvml = None
