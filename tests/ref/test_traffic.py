"""Replayed traffic (sessions: and trace: workloads) against the reference server."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import no_process_left, started_pids, write_arms
from tests.ref.test_cli import abbench, only_run
from tests.ref.test_load import arms as load_arms
from tests.ref.test_load import records


def arms(workloads: str, rounds: int = 2) -> str:
    return load_arms(workloads, ', --itl-ms, "2"', rounds=rounds)


def test_sessions_replay_sends_the_same_prompts_to_every_arm_and_round(
        tmp_path: Path, results: Path) -> None:
    wl = """
  - sessions: {count: 6, prefix_tokens: 96, turns: 3, user_tokens: 12, output_tokens: 4,
               think: 0.02, rate: 30, side_share: 0.3, steady: [0, 1]}
"""
    path = write_arms(tmp_path / "arms.yaml", arms(wl))
    r = abbench("run", str(path), "--results", str(results), "--plain")
    assert r.returncode == 0, r.stderr
    assert "| sessions output (tok/s) |" in r.stdout
    assert "| sessions TTFT later turns p90 (ms) |" in r.stdout
    # the reference server caches nothing (timings.cache_n 0): the gap is said, under the
    # table in report.md
    report = (only_run(results) / "report.md").read_text()
    assert "Replay sessions: cache cold; steady window 0%-100% of the planned send order" \
        in report
    assert "measured a 0.0%, b 0.0%" in report
    assert "Warning: sessions (a, round 1, rep 1): measured cache hit rate 0.0% against" \
        in report
    recs = records(only_run(results))
    reqs = [x for x in recs if x["type"] == "load_request"]
    by_slot: dict[int, dict[int, str]] = defaultdict(dict)
    for x in reqs:
        assert x["status"] == "ok", x
        assert x["prompt_tokens"] == x["input_length"]  # token-exact
        by_slot[x["slot"]][x["index"]] = x["nonce"]  # session#turn:digest of the ids
    assert len(by_slot) == 4  # 2 arms x 2 rounds
    first = next(iter(by_slot.values()))
    assert len(first) >= 18 and all(v == first for v in by_slot.values())
    # later turns carry the earlier ones: designed reuse > 0, first turns reuse the prefix
    turn2 = [x for x in reqs if x["turn"] == 2 and not x["side"]]
    assert all(x["designed_cached"] > x["input_length"] / 2 for x in turn2)
    samples = [x for x in recs if x["type"] == "sample"]
    assert len(samples) == 4 and all(s["level"] == "sessions" for s in samples)
    assert all(0.5 < s["metrics"]["trace_designed_hit_rate"] < 1 for s in samples)
    assert no_process_left(started_pids(servers=True))


def test_mooncake_trace_replayed_at_its_timestamps_by_two_client_processes(
        tmp_path: Path, results: Path) -> None:
    trace = tmp_path / "t.jsonl"
    r = abbench("trace", "make", "--kind", "mooncake", "--seed", "2", "--requests", "12",
                "--rate", "20", "--input-mean", "80", "--output-mean", "4",
                "--block-tokens", "16", "--shared-share", "0.5", "-o", str(trace))
    assert r.returncode == 0, r.stderr
    wl = """
  - name: replay
    trace: {file: t.jsonl, block_tokens: 16, speed: 2x, cache: warm, steady: [0, 1],
            workers: 2}
"""
    path = write_arms(tmp_path / "arms.yaml", arms(wl, rounds=1))
    r = abbench("run", str(path), "--results", str(results), "--plain")
    assert r.returncode == 0, r.stderr
    recs = records(only_run(results))
    reqs = [x for x in recs if x["type"] == "load_request"]
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(reqs) == 2 * len(rows)
    for x in reqs:  # sent at the trace's times, twice as fast (scheduling slack: 150 ms)
        want = rows[x["index"]]["timestamp"] / 1e3 / 2
        assert x["t_sched"] == pytest.approx(want, abs=1e-6)
        assert want - 0.01 <= x["t_start"] <= want + 0.15, (x["t_start"], want)
        assert x["prompt_tokens"] == rows[x["index"]]["input_length"]
    assert "cache warm" in (only_run(results) / "report.md").read_text()
    samples = [x for x in recs if x["type"] == "sample"]
    assert all(s["client_workers"] == 2 and s["valid"] for s in samples), samples
    assert no_process_left(started_pids(servers=True))


def test_a_bad_trace_is_exit_2_before_any_server(tmp_path: Path, results: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 10, '
                                      '"output_length": 2, "hash_ids": [1]}\nnot json\n')
    path = write_arms(tmp_path / "arms.yaml", arms("  - trace: {file: t.jsonl}\n", rounds=1))
    r = abbench("run", str(path), "--results", str(results), "--plain")
    assert r.returncode == 2
    assert "t.jsonl:2" in r.stderr and "not JSON" in r.stderr
    assert "Traceback" not in r.stderr
