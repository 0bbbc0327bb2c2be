"""Collectors without a GPU: Prometheus parsing, the NVML logic against a stand-in
pynvml module, windows and records, presets, drift warnings, and a whole run
against the reference server (no NVML here: VRAM is recorded unavailable, never 0)."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import pytest

from abbench.collectors.counters import counter_value
from abbench.collectors.drift import read_signals
from abbench.collectors.memory import MIB, Peaks, TreeSampler, open_nvml, summarize
from abbench.config.arms import resolve_arms
from abbench.config.loader import config_from_data, load_config
from abbench.config.presets import VLLM, arm_preset, with_overrides
from abbench.errors import ConfigError
from abbench.model.records import parse_records
from abbench.report.markdown import note_lines, note_text
from abbench.report.notes import collector_notes, drift_notes
from tests.faultkit import wait_for

ROOT = Path(__file__).resolve().parents[2]

METRICS_TEXT = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1536
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9
"""


# ------------------------------------------------------------------ Prometheus


def test_counter_value_reads_counters_by_wire_or_family_name() -> None:
    assert counter_value(METRICS_TEXT, "llamacpp:prompt_tokens_total") == 1536
    assert counter_value(METRICS_TEXT, "llamacpp:prompt_tokens") == 1536
    # summed over series; _created is not part of the count
    assert counter_value(METRICS_TEXT, "vllm:prefix_cache_queries_total") == 1500
    assert counter_value(METRICS_TEXT, "vllm:prefix_cache_queries", {"engine": "1"}) == 500


def test_counter_value_trusts_type_and_says_what_is_missing() -> None:
    with pytest.raises(KeyError, match="gauge, not a counter"):
        counter_value(METRICS_TEXT, "llamacpp:kv_cache_usage_ratio")
    with pytest.raises(KeyError, match="not among"):
        counter_value(METRICS_TEXT, "sglang:cached_tokens_total")
    with pytest.raises(KeyError, match="no series"):
        counter_value(METRICS_TEXT, "vllm:prefix_cache_queries", {"engine": "7"})


# ------------------------------------------------------------------------ NVML


class FakeNvml(types.ModuleType):
    """A stand-in pynvml: two GPUs, processes and memory set by the test."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0
    nvmlMemory_v2 = 0x02000028

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.procs: dict[int, list[Any]] = {0: [], 1: []}
        self.used_v1 = {0: 0, 1: 0}
        self.used_v2 = {0: 0, 1: 0}
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i > 1:
            raise RuntimeError("NVMLError_InvalidArgument")
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return {"GPU-aaaa": 0, "GPU-bbbb": 1}[uuid]

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"Fake H200"

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return self.procs[h]

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        return NS(used=self.used_v2[h] if version else self.used_v1[h])

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 1980 if clock == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 50 + h

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 400_000


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def test_gpus_come_from_config_then_cuda_visible_devices_then_all(fake_nvml: FakeNvml) -> None:
    nv, why = open_nvml(None, {})
    assert why is None and nv is not None and nv.handles == [0, 1]
    nv, _ = open_nvml(None, {"CUDA_VISIBLE_DEVICES": "1"})
    assert nv is not None and nv.handles == [1]
    nv, _ = open_nvml(["GPU-aaaa"], {"CUDA_VISIBLE_DEVICES": "1"})
    assert nv is not None and nv.handles == [0]
    nv, why = open_nvml(None, {"CUDA_VISIBLE_DEVICES": ""})
    assert nv is None and "CUDA_VISIBLE_DEVICES is empty" in (why or "")
    nv, why = open_nvml([5], {})
    assert nv is None and "could not open" in (why or "")


def test_no_nvml_bindings_is_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    nv, why = open_nvml(None, {})
    assert nv is None and "nvidia-ml-py" in (why or "")


def test_process_tree_memory_counts_only_the_tree_and_device_uses_v2(
        fake_nvml: FakeNvml) -> None:
    nv, _ = open_nvml(None, {})
    assert nv is not None
    fake_nvml.procs = {0: [NS(pid=10, usedGpuMemory=100 * MIB), NS(pid=99, usedGpuMemory=7)],
                       1: [NS(pid=11, usedGpuMemory=50 * MIB)]}
    assert nv.process_bytes({10, 11}) == (150 * MIB, True)
    assert nv.process_bytes({12}) == (0, False)
    fake_nvml.procs[1] = [NS(pid=11, usedGpuMemory=None)]
    assert nv.process_bytes({10, 11}) == (None, True)
    fake_nvml.used_v1, fake_nvml.used_v2 = {0: 700, 1: 700}, {0: 100, 1: 200}
    assert nv.device_bytes() == 300  # v2: what nvidia-smi shows, without reserved memory


def test_sampler_keeps_the_peak_of_each_open_window(fake_nvml: FakeNvml) -> None:
    nv, _ = open_nvml([0], {})
    assert nv is not None
    me = os.getpid()
    fake_nvml.procs[0] = [NS(pid=me, usedGpuMemory=100 * MIB)]
    fake_nvml.used_v2[0] = 600 * MIB
    s = TreeSampler(me, 0.005, nv, rss=True)

    def sampled(wid: int) -> None:
        """Until the sampling thread has read the fake NVML as it is now into ``wid``: two
        samples more (the first may have read it before the change)."""
        n = s.windows[wid].samples
        wait_for(lambda: s.windows[wid].samples > n + 1, 60, "the sampling thread")

    s.start()
    try:
        life = s.open()
        sampled(life)
        window = s.open()
        fake_nvml.procs[0] = [NS(pid=me, usedGpuMemory=300 * MIB)]
        sampled(window)
        fake_nvml.procs[0] = [NS(pid=me, usedGpuMemory=200 * MIB)]
        sampled(window)
        w = s.close(window)
        fake_nvml.procs[0] = [NS(pid=me, usedGpuMemory=400 * MIB)]
        sampled(life)
        whole = s.close(life)
    finally:
        s.stop()
    assert w.process == 300 * MIB and whole.process == 400 * MIB
    assert whole.samples > w.samples >= 3
    assert whole.device == 600 * MIB and whole.rss and whole.rss > 10 * MIB
    metrics, unavailable = summarize(whole, gpu=True, nvml_reason=None, rss_fallback=True,
                                     server_row=True)
    assert metrics == {"peak_vram_mib": 400.0, "device_vram_mib": 600.0} and not unavailable


def test_summaries_never_turn_unknown_into_zero() -> None:
    p = Peaks()
    p.add(None, False, 5 * MIB, 80 * MIB)
    m, u = summarize(p, gpu=True, nvml_reason="no NVML", rss_fallback=True, server_row=False)
    assert m == {"peak_rss_mib": 80.0} and u == {"peak_vram_mib": "no NVML"}
    m, u = summarize(p, gpu=True, nvml_reason=None, rss_fallback=False, server_row=False)
    assert m == {} and "no process of the server's tree" in u["peak_vram_mib"]
    p.add(None, True, 5 * MIB, 80 * MIB)  # listed, memory unknown
    m, u = summarize(p, gpu=True, nvml_reason=None, rss_fallback=False, server_row=True)
    assert "peak_vram_mib" not in m and "usedGpuMemory" in u["peak_vram_mib"]
    assert m == {"device_vram_mib": 5.0}


def test_drift_signals_read_gpu_and_cpu(fake_nvml: FakeNvml) -> None:
    nv, _ = open_nvml(None, {})
    sig = read_signals(nv)
    assert sig["gpu_sm_clock_mhz"] == 1980 and sig["gpu_mem_clock_mhz"] == 3201
    assert sig["gpu_temp_c"] == 50.5 and sig["gpu_power_w"] == 400.0
    assert "cpu_load_1m" in sig


# ------------------------------------------------------------- report notes


def _drift(arm: str, rnd: int, **signals: float) -> dict[str, Any]:
    return {"type": "drift", "arm": arm, "round": rnd, "slot": rnd, "warn_pct": 5.0,
            "signals": {k: {"mean": v, "min": v, "max": v, "n": 3} for k, v in signals.items()}}


def test_drift_warns_when_arms_differ_or_the_run_drifts() -> None:
    recs = [_drift("a", 0, gpu_sm_clock_mhz=1980, gpu_temp_c=40),
            _drift("b", 0, gpu_sm_clock_mhz=1980, gpu_temp_c=41),
            _drift("a", 1, gpu_sm_clock_mhz=1980, gpu_temp_c=60),
            _drift("b", 1, gpu_sm_clock_mhz=1500, gpu_temp_c=61)]
    warnings, table = drift_notes(parse_records(recs))
    assert table is not None and "| GPU SM clock (MHz) | b | 1980.0 | 1500.0 |" in note_lines(table)
    text = " ".join(note_text(n) for n in warnings)
    assert {n.kind for n in warnings} == {"drift_between_arms", "drift_across_run"}
    assert "GPU SM clock differs between arms" in text
    assert "GPU temperature drifted across the run" in text
    assert "GPU temperature differs" not in text
    steady = [_drift(a, r, gpu_sm_clock_mhz=1980) for a in "ab" for r in range(3)]
    assert drift_notes(parse_records(steady))[0] == []


def test_notes_say_what_was_unavailable_and_the_sampling_period() -> None:
    recs = [{"type": "sample", "arm": "a", "round": 0, "workload": "server",
             "collector": "vram", "metrics": {"peak_rss_mib": 10.0},
             "unavailable": {"peak_vram_mib": "no NVML"}, "period_ms": 20.0}]
    notes = [note_text(n) for n in collector_notes(parse_records(recs))]
    assert "Unavailable: peak_vram_mib: no NVML." in notes
    assert any("every 20 ms" in n for n in notes)


# ------------------------------------------------------------ config, presets


def _cfg(collectors: list[Any], **arm: Any) -> Any:
    return config_from_data({
        "arms": [{"name": "a", "start": ["x", "{port}"], **arm},
                 {"name": "b", "start": ["x", "{port}"]}],
        "defaults": {"preset": "vllm"},
        "workloads": [{"contexts": [256]}], "collectors": collectors}, source="t.yaml")


def test_collectors_are_typed_and_errors_name_the_field() -> None:
    cfg = _cfg([{"kind": "vram"}, {"kind": "prometheus"},
                {"kind": "response_field", "field": "timings.cache_n"}])
    assert cfg.collectors[0].period_ms <= 50
    assert cfg.collectors[2].field == ["timings.cache_n"]
    with pytest.raises(ConfigError, match=r"collectors\[0\]"):
        _cfg([{"kind": "vram", "period": 5}])
    with pytest.raises(ConfigError, match="needs a group"):
        _cfg([{"kind": "log_regex", "pattern": "misses=\\d+"}])
    with pytest.raises(ConfigError, match="collectors"):
        _cfg([{"kind": "gpu-magic"}])


def test_every_preset_field_can_be_overridden_per_arm() -> None:
    cfg = _cfg([], preset_fields={"metrics_path": "/m", "misses_counter": "x_total",
                                  "cached_tokens_fields": "meta_info.cached_tokens"})
    a, b = resolve_arms(cfg)
    pa, pb = arm_preset(a), arm_preset(b)
    assert pa.metrics_path == "/m" and pa.misses_counter == "x_total"
    assert pa.cached_tokens_fields == ("meta_info.cached_tokens",)
    assert pa.misses_minus_counter == "vllm:prompt_tokens_cached_total"  # the rest: the preset's
    assert pb == VLLM
    with pytest.raises(ConfigError, match="unknown preset field 'metric_path'"):
        resolve_arms(_cfg([], preset_fields={"metric_path": "/m"}))
    with pytest.raises(ConfigError, match="use tokenize_path"):
        resolve_arms(_cfg([], preset_fields={"tokenize_path": "/t"}))
    with pytest.raises(ConfigError, match="must be like"):
        with_overrides(VLLM, {"prepend_bos": "yes"})


@pytest.mark.parametrize("path", sorted((ROOT / "arms").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_arms_file_loads(path: Path) -> None:
    """The arms files the docs and scripts/h200-scale.sh run load as typed configs."""
    cfg = load_config(path)
    assert len(cfg.arms) >= 2 and cfg.workloads


@pytest.mark.parametrize("name", ["sglang", "vllm"])
def test_example_arms_files_validate(name: str) -> None:
    cfg = load_config(ROOT / "arms" / f"{name}.yaml")
    kinds = {c.kind for c in cfg.collectors}
    assert {"vram", "prometheus"} <= kinds
    proc = subprocess.run([sys.executable, "-m", "abbench.cli", "validate",
                           str(ROOT / "arms" / f"{name}.yaml")], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------- a whole run, no GPU here




def test_log_regex_reads_only_what_the_log_gained(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each window opened by reading the whole server log for the last running total
    (a long life's log, read again for every row); it reads what the log gained since
    the window before, a line still being written again, and a new file at the path
    from its start."""
    from abbench.collectors import counters
    from abbench.config.collectors import LogRegexSettings

    monkeypatch.setattr(counters, "_settled_size", lambda p: p.stat().st_size)
    log = tmp_path / "a-r0.log"
    log.write_text("load\ntotal=10\ntotal=25\n")
    c = counters.LogRegexCollector(LogRegexSettings(kind="log_regex", pattern=r"total=(\d+)",
                                                    mode="last"))
    ctx: Any = NS(server=NS(log_path=log))
    read: list[int] = []
    real_open = open

    def counting_open(path: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        f = real_open(path, mode, *a, **k)
        if "b" in mode:
            real_read = f.read
            f.read = lambda n=-1: read.append(n) or real_read(n)  # type: ignore[method-assign]
        return f

    monkeypatch.setattr("builtins.open", counting_open)
    first = c.begin_window(ctx, "decode 64")
    assert first.data == {"offset": log.stat().st_size, "last": 25.0}
    with real_open(log, "a") as f:
        f.write("total=40\ntotal=4")  # the last line not yet whole
    second = c.begin_window(ctx, "decode 128")
    assert second.data["last"] == 4.0 and read[-1] == len("total=40\ntotal=4")
    with real_open(log, "a") as f:
        f.write("7\n")
    assert c.begin_window(ctx, "decode 256").data["last"] == 47.0
    assert read[-1] == len("total=47\n")  # the partial line again, nothing before it
    log.write_text("total=3\n")  # a shorter file: another life's log at this path
    assert c.begin_window(ctx, "decode 64").data["last"] == 3.0
