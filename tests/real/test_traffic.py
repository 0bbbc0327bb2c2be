"""Replayed multi-turn sessions against the real llama-server: -np 4 with the prompt
cache and --cache-reuse against -np 4 with --no-cache-prompt (its cache off)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import llama_start, no_process_left, started_pids, write_arms


def test_real_sessions_cache_on_against_off(tmp_path: Path, results: Path, real_parts) -> None:
    tag = f"abbench-traffic-{tmp_path.name}"  # names this test's servers among any others
    base = [*llama_start(real_parts, "--alias", tag, ctx=4096), "-np", "4"]
    arms = write_arms(tmp_path / "arms.yaml", f"""
rounds: 4
warmup: 0
defaults: {{preset: llama.cpp, ready: {{timeout: 120}}}}
arms:
  - {{name: nocache, start: {json.dumps([*base, "--no-cache-prompt"])}}}
  - {{name: reuse, start: {json.dumps([*base, "--cache-reuse", "64"])}}}
workloads:
  - sessions: {{count: 4, prefix_tokens: 192, turns: 3, user_tokens: 24, output_tokens: 8,
                think: 0.05, rate: 2, steady: [0, 1], cache: cold, timeout: 300}}
""")
    r = subprocess.run([sys.executable, "-m", "abbench.cli", "run", str(arms), "--results",
                        str(results), "--plain"], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr
    (run,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    (run / "report.txt").write_text(r.stdout)
    recs = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    samples = [s for s in recs if s["type"] == "sample"]
    assert len(samples) == 8 and all(s["valid"] for s in samples), samples
    reqs = [x for x in recs if x["type"] == "load_request"]
    assert all(x["status"] == "ok" and x["prompt_tokens"] == x["input_length"] for x in reqs)
    hit = {s["arm"]: [] for s in samples}
    for s in samples:
        hit[s["arm"]].append(s["metrics"]["trace_hit_rate"])
        assert s["metrics"]["trace_designed_hit_rate"] > 0.6
    # the server's timings.cache_n: nothing with the cache off, most of the design with it
    assert all(h == 0 for h in hit["nocache"]), hit
    assert all(h > 0.4 for h in hit["reuse"]), hit
    # designed against measured, said; the cache-off arm is far from the design
    report = (run / "report.md").read_text()  # the notes are under the table
    assert "Replay sessions: cache cold" in report and "designed cache hit rate" in report
    assert "Warning: sessions (nocache, round" in report
    # later turns reuse their conversation: their TTFT falls with the cache, decided in 4
    # rounds (3 gave -92.4% [-97.1, -80.2], "~1 more round" under the run's BH correction)
    line = next(x for x in r.stdout.splitlines()
                if x.startswith("| sessions TTFT later turns p90 (ms) |"))
    assert "▲" in line, line
    assert no_process_left(started_pids(servers=True))
