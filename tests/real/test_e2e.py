"""End to end against the real llama-server: two builds, 2 rounds, contexts 256 and 1K."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import llama_start, no_process_left, started_pids, write_arms


def test_real_ab_of_two_llama_server_builds(tmp_path: Path, results: Path, real_parts,
                                             real_parts_noavx2):
    tag = f"abbench-e2e-{tmp_path.name}"  # names this test's servers among any others
    fast = llama_start(real_parts, "--alias", tag)
    slow = llama_start(real_parts_noavx2, "--alias", tag)
    arms = write_arms(tmp_path / "arms.yaml", f"""
rounds: 2
defaults:
  preset: llama.cpp
  ready: {{timeout: 120}}
arms:
  - name: noavx2
    label: "build without AVX2"
    start: {json.dumps(slow)}
  - name: avx2
    label: "build with AVX2"
    start: {json.dumps(fast)}
workloads:
  - contexts: [256, 1024]
    decode_tokens: 32
""")
    r = subprocess.run([sys.executable, "-m", "abbench.cli", "run", str(arms), "--results",
                        str(results), "--plain"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "| | build without AVX2 | build with AVX2 |" in r.stdout
    assert "| decode 256 (tok/s) |" in r.stdout and "| decode 1K (tok/s) |" in r.stdout
    (run,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    recs = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    samples = [s for s in recs if s["type"] == "sample"]
    assert len(samples) == 2 * 2 * 2 and all(s["valid"] for s in samples), samples
    assert all(s["completion_tokens"] == 32 and s["prompt_tokens"] == s["context"]
               for s in samples)
    for ctx in (256, 1024):
        mean = {arm: sum(s["metrics"]["decode_tok_s"] for s in samples
                         if s["arm"] == arm and s["context"] == ctx) / 2
                for arm in ("avx2", "noavx2")}
        assert mean["avx2"] > mean["noavx2"], (ctx, mean)
    meta = json.loads((run / "run.json").read_text())
    assert meta["servers"]["avx2"]  # what llama-server says about itself (/props)
    assert "timing agreement" in (run / "report.md").read_text()  # under the table
    assert no_process_left(started_pids(servers=True))
