"""Collectors without a GPU: Prometheus parsing, the NVML logic against a stand-in
pynvml module, windows and records, presets, drift warnings, and a whole run
against the reference server (no NVML here: VRAM is recorded unavailable, never 0)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from abbench.campaign.runner import Campaign, RunOptions
from abbench.config.loader import load_config
from abbench.report.markdown import render_markdown
from abbench.report.table import table_of
from tests.conftest import no_server_left, refserver_start, write_arms

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ Prometheus


# ------------------------------------------------------------------------ NVML


# ------------------------------------------------------------- report notes


# ------------------------------------------------------------ config, presets


# ------------------------------------------------- a whole run, no GPU here


def test_a_run_with_collectors_records_rows_and_unavailable_vram(
        tmp_path: Path, results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as on a machine without NVIDIA
    start = json.dumps(refserver_start("--rate", "400"))
    arms = write_arms(tmp_path / "arms.yaml", f"""
        rounds: 2
        warmup: 1
        defaults: {{preset: llama.cpp, ready: {{timeout: 30}}}}
        arms:
          - {{name: a, start: {start}}}
          - {{name: b, start: {start}}}
        workloads:
          - contexts: [256, 512]
            decode_tokens: 16
        collectors:
          - {{kind: flush, path: /flush_cache}}  # llama.cpp has none: refused without path
          - {{kind: vram, period_ms: 10}}
          - {{kind: prometheus}}
          - {{kind: response_field, name: misses_per_token_timings,
             label: misses/token (timings)}}
          - {{kind: drift, period_s: 0.2}}
    """)
    cfg = load_config(arms)
    out = Campaign(cfg, RunOptions(results=results)).execute()
    assert out.status == "complete" and out.failed_slots == 0
    assert no_server_left(out.run.path)
    recs = [r.data() for r in out.run.records()]
    vram = [r for r in recs if r.get("collector") == "vram"]
    assert len(vram) == 4 * 3  # 4 server lives x (2 workload rows + the server life)
    for r in vram:
        assert r["type"] == "sample" and r["valid"] and r["period_ms"] == 10
        assert "peak_vram_mib" not in r["metrics"]  # never a 0 in its place
        assert "NVML" in r["unavailable"]["peak_vram_mib"] or "nvidia-ml-py" in \
            r["unavailable"]["peak_vram_mib"]
        assert r["metrics"]["peak_rss_mib"] > 5
        assert {"arm", "round", "position", "slot"} <= set(r)
    prom = {(r["arm"], r["round"], r["workload"]): r["metrics"]["misses_per_token"]
            for r in recs if r.get("collector") == "prometheus" and r["type"] == "sample"}
    # the reference server counts every prompt token as processed: context / decoded
    assert prom[("a", 0, "decode 256")] == 256 / 16 and prom[("b", 1, "decode 512")] == 32
    timings = [r for r in recs if r.get("collector") == "response_field"]
    assert len(timings) == 8 and {r["window"] for r in timings} == {"request"}
    assert sorted({r["metrics"]["misses_per_token_timings"] for r in timings}) == [16.0, 32.0]
    assert len([r for r in recs if r["type"] == "drift"]) == 4
    md = out.report_md
    for row in ("| decode 256 peak RSS (MiB) |", "| decode 512 misses/token |",
                "| peak RSS (MiB) |"):
        assert row in md
    assert "Unavailable: peak_vram_mib" in md and "Drift signals" in md
    assert "Cache flushes: 8 of 8 succeeded." in md
    # a metric of the user's own keeps its label when the report is rebuilt from disk
    rebuilt = render_markdown(table_of(out.run.records(), out.run.meta()))
    assert "| decode 256 misses/token (timings) |" in rebuilt
