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
    gpu_list, driver, _cuda = _nvml()
    return gpu_list, driver


def _nvml() -> tuple[list[dict[str, Any]], str | None, str | None]:
    """GPUs, driver version and the CUDA version the driver supports, through NVML."""
    try:
        import pynvml
    except ImportError:
        return [], None, None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound and friends: no NVIDIA driver here
        return [], None, None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = None
        with contextlib.suppress(Exception):
            v = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
            cuda = f"{v // 1000}.{v % 1000 // 10}"
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append({"index": i, "name": pynvml.nvmlDeviceGetName(h),
                        "memory_total_mib": mem.total // (1024 * 1024),
                        "uuid": pynvml.nvmlDeviceGetUUID(h)})
        return out, driver, cuda
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def visible(gpu_list: list[dict[str, Any]], spec: str | None) -> list[dict[str, Any]]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs, or their prefixes) lets a
    server use; all of them when it is unset, none when it is empty."""
    if spec is None:
        return list(gpu_list)
    out = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        for g in gpu_list:
            hit = g["index"] == int(item) if item.isdigit() else \
                str(g["uuid"]).startswith(item)
            if hit and g not in out:
                out.append(g)
    return out


def host_fingerprint(env: dict[str, Any] | None = None) -> dict[str, Any]:
    """What decides whether two hosts' ratios can be compared: the host name, the GPUs
    a server here may use (name, UUID), driver, CUDA, CPU model."""
    env = env if env is not None else environment()
    used = visible(env.get("gpus") or [], env.get("cuda_visible_devices"))
    return {"hostname": env.get("host"),
            "gpus": [{"name": g.get("name"), "uuid": g.get("uuid")} for g in used],
            "driver": env.get("driver"), "cuda": env.get("cuda"), "cpu": env.get("cpu")}


def environment() -> dict[str, Any]:
    gpu_list, driver, cuda = _nvml()
    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "abbench": __version__,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpu_list,
        "driver": driver,
        "cuda": cuda,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if gpu_list:
        names = sorted({g["name"] for g in gpu_list})
        env["gpu_summary"] = f"{len(gpu_list)}x {', '.join(names)} (driver {driver})"
    return env
