"""What machine a run ran on: host, CPU, GPUs and driver (NVML, when present)."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
from typing import Any

from abbench.version import __version__


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def gpus() -> tuple[list[dict[str, Any]], str | None]:
    """GPUs seen through NVML and the driver version; ([], None) without NVML."""
    try:
        import pynvml
    except ImportError:
        return [], None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound and friends: no NVIDIA driver here
        return [], None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append({"index": i, "name": pynvml.nvmlDeviceGetName(h),
                        "memory_total_mib": mem.total // (1024 * 1024),
                        "uuid": pynvml.nvmlDeviceGetUUID(h)})
        return out, driver
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def environment() -> dict[str, Any]:
    gpu_list, driver = gpus()
    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "abbench": __version__,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpu_list,
        "driver": driver,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if gpu_list:
        names = sorted({g["name"] for g in gpu_list})
        env["gpu_summary"] = f"{len(gpu_list)}x {', '.join(names)} (driver {driver})"
    return env
