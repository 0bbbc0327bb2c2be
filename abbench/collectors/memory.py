"""Peak memory of a server's whole process tree: GPU memory through NVML
(per process, keyed by host PIDs, and the device total), resident memory
through psutil. One sampling thread per server life feeds every open window."""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from abbench.collectors.base import Collector, WindowState, record_window
from abbench.config.collectors import RssSettings, VramSettings
from abbench.model.rows import SERVER_ROW
from abbench.slot import SlotContext

MIB = 1024 * 1024


# ------------------------------------------------------------------------ NVML


@dataclass
class Nvml:
    """An initialised NVML module and the device handles to watch."""

    mod: Any
    handles: list[Any]
    names: list[str]

    def process_bytes(self, pids: set[int]) -> tuple[int | None, bool]:
        """Bytes used by ``pids`` over the watched GPUs, and whether any of them appeared.

        (None, True) when NVML lists one of them but cannot say its memory."""
        total, seen, unknown = 0, False, False
        for h in self.handles:
            procs: list[Any] = []
            for fn in ("nvmlDeviceGetComputeRunningProcesses",
                       "nvmlDeviceGetGraphicsRunningProcesses"):
                getter = getattr(self.mod, fn, None)
                if getter is None:
                    continue
                try:
                    procs.extend(getter(h))
                except Exception:  # NVMLError_NotSupported on some devices
                    continue
            counted: set[int] = set()
            for p in procs:
                if p.pid in pids and p.pid not in counted:
                    counted.add(p.pid)
                    seen = True
                    used = getattr(p, "usedGpuMemory", None)
                    if used is None:
                        unknown = True
                    else:
                        total += int(used)
        if unknown:
            return None, seen
        return total, seen

    def device_bytes(self) -> int:
        """Device memory in use, as nvidia-smi counts it: the v2 query, whose ``used``
        leaves out the driver's reserved memory (v1's includes it: about 615 MiB more
        on an H200); v1 where the driver or bindings lack v2."""
        total = 0
        v2 = getattr(self.mod, "nvmlMemory_v2", None)
        for h in self.handles:
            info = None
            if v2 is not None:
                with contextlib.suppress(Exception):
                    info = self.mod.nvmlDeviceGetMemoryInfo(h, version=v2)
            if info is None:
                info = self.mod.nvmlDeviceGetMemoryInfo(h)
            total += int(info.used)
        return total

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.mod.nvmlShutdown()


def _visible(env: dict[str, str] | None) -> list[str] | None:
    value = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def open_nvml(gpus: list[int | str] | None, env: dict[str, str] | None = None
              ) -> tuple[Nvml | None, str | None]:
    """NVML with the GPUs to watch, or (None, why not). Never raises.

    GPUs: ``gpus`` (NVML indices or UUIDs), else the arm's CUDA_VISIBLE_DEVICES
    (read as NVML indices: set CUDA_DEVICE_ORDER=PCI_BUS_ID so they agree), else all.
    """
    try:
        mod = importlib.import_module("pynvml")
    except ImportError:
        return None, "no NVML bindings (pip install nvidia-ml-py)"
    try:
        mod.nvmlInit()
    except Exception as e:
        return None, f"NVML did not initialise ({type(e).__name__}: no NVIDIA driver?)"
    try:
        wanted: list[int | str] | list[str] | list[int] | None = (
            gpus if gpus is not None else _visible(env))
        if wanted is None:
            wanted = list(range(mod.nvmlDeviceGetCount()))
        if not wanted:
            mod.nvmlShutdown()
            return None, "no GPU is visible to the server (CUDA_VISIBLE_DEVICES is empty)"
        handles, names = [], []
        for g in wanted:
            gs = str(g)
            if gs.isdigit():
                h = mod.nvmlDeviceGetHandleByIndex(int(gs))
            else:
                h = mod.nvmlDeviceGetHandleByUUID(gs)
            handles.append(h)
            name = mod.nvmlDeviceGetName(h)
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        return Nvml(mod, handles, names), None
    except Exception as e:
        with contextlib.suppress(Exception):
            mod.nvmlShutdown()
        return None, f"NVML could not open the GPUs {wanted}: {type(e).__name__}: {e}"


# --------------------------------------------------------------- the sampler


def tree_pids(root: int) -> set[int]:
    """The PID of ``root`` and of all its descendants (gone ones are skipped)."""
    try:
        p = psutil.Process(root)
        return {root} | {c.pid for c in p.children(recursive=True)}
    except psutil.Error:
        return set()


def tree_rss(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total


@dataclass
class Peaks:
    """Maxima over one window, in bytes, and how many samples made them."""

    process: int | None = None
    device: int | None = None
    rss: int | None = None
    samples: int = 0
    seen_on_gpu: bool = False
    process_unknown: bool = False

    def add(self, process: int | None, seen: bool, device: int | None, rss: int | None) -> None:
        self.samples += 1
        if seen:
            self.seen_on_gpu = True
            if process is None:
                self.process_unknown = True
        if process is not None:
            self.process = max(self.process or 0, process)
        if device is not None:
            self.device = max(self.device or 0, device)
        if rss is not None:
            self.rss = max(self.rss or 0, rss)


@dataclass
class TreeSampler:
    """A thread sampling a process tree every ``period`` seconds into open windows."""

    root_pid: int
    period: float
    nvml: Nvml | None
    rss: bool
    alive: Callable[[], bool] = lambda: True
    windows: dict[int, Peaks] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _next_id: int = 0
    _pids: set[int] = field(default_factory=set)
    _pids_at: float = 0.0
    errors: list[str] = field(default_factory=list)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="abbench-memory",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(2.0, 4 * self.period))

    def open(self) -> int:
        with self._lock:
            wid = self._next_id
            self._next_id += 1
            self.windows[wid] = Peaks()
        self.sample_once()
        return wid

    def close(self, wid: int) -> Peaks:
        self.sample_once()
        with self._lock:
            return self.windows.pop(wid)

    def sample_once(self) -> None:
        now = time.perf_counter()
        if not self._pids or now - self._pids_at > 0.5:  # the tree rarely changes
            self._pids = tree_pids(self.root_pid)
            self._pids_at = now
        pids = self._pids
        process = device = rss = None
        seen = False
        if self.nvml is not None:
            try:
                process, seen = self.nvml.process_bytes(pids)
                device = self.nvml.device_bytes()
            except Exception as e:  # a GPU fell off the bus: say so once, keep going
                if len(self.errors) < 3:
                    self.errors.append(f"{type(e).__name__}: {e}")
        if self.rss:
            rss = tree_rss(pids)
        with self._lock:
            for peaks in self.windows.values():
                peaks.add(process, seen, device, rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            if not self.alive():
                break
            self.sample_once()


# ----------------------------------------------------------------- collectors


class MemoryCollector(Collector):
    """Peak VRAM (NVML) with RSS as fallback, or peak RSS alone (``kind: rss``)."""

    def __init__(self, settings: VramSettings | RssSettings):
        self.settings = settings
        self.name = settings.kind
        self.gpu = isinstance(settings, VramSettings)
        self.sampler: TreeSampler | None = None
        self.nvml_reason: str | None = None
        self.server_window: int | None = None
        self.gpu_names: list[str] = []

    # one sampler per server life
    def begin_server(self, ctx: SlotContext) -> None:
        self.close()
        nvml = None
        if self.gpu:
            assert isinstance(self.settings, VramSettings)
            nvml, self.nvml_reason = open_nvml(self.settings.gpus, ctx.arm.env)
            self.gpu_names = nvml.names if nvml else []
        self.sampler = TreeSampler(ctx.server.pid, self.settings.period_ms / 1e3, nvml,
                                   self._rss_fallback,
                                   alive=ctx.server.alive)
        self.sampler.start()
        if "server" in self.settings.windows:
            self.server_window = self.sampler.open()

    @property
    def _rss_fallback(self) -> bool:
        return not self.gpu or bool(getattr(self.settings, "rss_fallback", False))

    def end_server(self, ctx: SlotContext) -> None:
        if self.sampler is not None and self.server_window is not None:
            peaks = self.sampler.close(self.server_window)
            self.server_window = None
            self._record(ctx, SERVER_ROW, "server", peaks)
        self.close()

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            if self.sampler.nvml is not None:
                self.sampler.nvml.shutdown()
            self.sampler = None

    def begin_window(self, ctx: SlotContext, row: str) -> WindowState | None:
        if "workload" not in self.settings.windows:
            return None
        if self.sampler is None:  # no server-life task ran: sample this window alone
            self.begin_server(ctx)
        assert self.sampler is not None
        return WindowState(row, {"wid": self.sampler.open()})

    def end_window(self, ctx: SlotContext, state: WindowState) -> None:
        if self.sampler is None:
            return
        self._record(ctx, state.row, "workload", self.sampler.close(state.data["wid"]))

    def _record(self, ctx: SlotContext, row: str, window: str, peaks: Peaks) -> None:
        metrics, unavailable = summarize(peaks, gpu=self.gpu, nvml_reason=self.nvml_reason,
                                         rss_fallback=self._rss_fallback,
                                         server_row=row == SERVER_ROW)
        detail: dict[str, Any] = {"period_ms": self.settings.period_ms,
                                  "n_samples": peaks.samples}
        if self.gpu_names:
            detail["gpus"] = self.gpu_names
        if self.sampler is not None and self.sampler.errors:
            detail["errors"] = list(self.sampler.errors)
        record_window(ctx, collector=self.name, window=window, workload=row, metrics=metrics,
                      unavailable=unavailable, **detail)


def summarize(peaks: Peaks, *, gpu: bool, nvml_reason: str | None, rss_fallback: bool,
              server_row: bool) -> tuple[dict[str, float], dict[str, str]]:
    """Peaks -> the metrics to store and the ones unavailable (with why)."""
    metrics: dict[str, float] = {}
    unavailable: dict[str, str] = {}
    if gpu:
        if nvml_reason is not None:
            unavailable["peak_vram_mib"] = nvml_reason
        elif peaks.process_unknown:
            unavailable["peak_vram_mib"] = ("NVML lists the server's processes but not their "
                                            "memory (usedGpuMemory is unavailable)")
        elif not peaks.seen_on_gpu:
            unavailable["peak_vram_mib"] = ("no process of the server's tree appeared on the "
                                            "GPU (a CPU server, or PIDs of another namespace)")
        elif peaks.process is not None:
            metrics["peak_vram_mib"] = peaks.process / MIB
        if server_row and peaks.device is not None:
            metrics["device_vram_mib"] = peaks.device / MIB
    use_rss = not gpu or (rss_fallback and "peak_vram_mib" in unavailable)
    if use_rss and peaks.rss is not None:
        metrics["peak_rss_mib"] = peaks.rss / MIB
    elif use_rss:
        unavailable["peak_rss_mib"] = "the server's process tree could not be read"
    return metrics, unavailable
