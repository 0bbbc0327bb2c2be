"""Capacity under an SLA against the reference server, whose latency rises at a known
concurrency (--knee): the search finds that level within its resolution for both arms,
and arm B's knee one level higher reads changed: every one of 6 rounds agrees, the sign
test's p 2^-5 (2 rounds that agree decide nothing)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import REFSERVER, no_process_left, started_pids, write_arms
from tests.ref.test_cli import abbench, only_run

# 50 tokens/s: 8 tokens end 140 ms after the first up to the knee, 1.54 s beyond it
# (each gap 200 ms longer); the end-to-end bound sits between, with room for a busy
# 2-core machine's scheduling spikes (up to 140 ms measured here): the server keeps an
# absolute schedule, so a late token does not delay the ones after it
RATE, BOUND_MS = 50, 500


def arms(tmp_path: Path, knee_a: int, knee_b: int, rounds: int = 6) -> Path:
    py = sys.executable
    marker = str(tmp_path / "stop.log")  # in each server's command line: our PIDs only

    def start(knee: int) -> str:
        return (f'[{py}, {REFSERVER}, --port, "{{port}}", --slots, "64", --rate, "{RATE}", '
                f'--knee, "{knee}", --stop-log, "{marker}"]')

    return write_arms(tmp_path / "arms.yaml", f"""
rounds: {rounds}
seed: 5
warmup: 0
defaults: {{preset: llama.cpp, ready: {{timeout: 20}}, stop_grace: 3}}
arms:
  - {{name: a, start: {start(knee_a)}}}
  - {{name: b, start: {start(knee_b)}}}
workloads:
  - capacity: {{concurrency: [3, 8], resolution: 1, e2e_p99_ms: {BOUND_MS}, requests: 8,
                warmup: 0, prompt_tokens: 16, output_tokens: 8}}
""")


def test_search_finds_the_knee_and_a_planted_level_reads_changed(tmp_path: Path,
                                                                 results: Path) -> None:
    path = arms(tmp_path, 4, 5)
    r = abbench("run", str(path), "--results", str(results), "--plain")
    assert r.returncode == 0, r.stderr
    run = only_run(results)
    recs = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    answers = [x for x in recs if x["type"] == "sample" and x["workload"] == "capacity"]
    assert len(answers) == 12 and all(x["valid"] for x in answers), answers
    for x in answers:
        knee = 4 if x["arm"] == "a" else 5
        # within the resolution (1): the highest level meeting the bound is the knee
        assert x["metrics"]["capacity_max_concurrency"] == knee, x["capacity"]
        assert x["capacity"]["bad"] == knee + 1
    levels = [x for x in recs if x["type"] == "capacity_level"]
    assert {(x["arm"], x["concurrency"], x["meets"]) for x in levels} >= {
        ("a", 4, True), ("a", 5, False), ("b", 5, True), ("b", 6, False)}
    report = json.loads((run / "report.json").read_text())
    row = next(x for x in report["rows"] if x["metric"] == "capacity_max_concurrency")
    assert row["cells"]["b"]["verdict"] == "changed", row
    assert "max concurrency meeting the SLA" in r.stdout
    assert (run / "capacity.png").stat().st_size > 10_000
    assert no_process_left(started_pids(servers=True))
