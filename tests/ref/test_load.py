"""Load workloads against the reference server, whose per-token delays are known."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from abbench.model.load import aggregate, percentile
from tests.conftest import REFSERVER, no_server_left, write_arms
from tests.ref.test_cli import abbench, only_run

# the server's gaps between tokens cycle through 20, 25, ..., 110 ms and one of 300:
# p50 and p90 fall between two close values, p99 inside the top one, so that a few
# ms of scheduling jitter (a busy 2-core machine) barely move them; each request's
# 20 gaps are one cycle
GAPS = [*range(20, 115, 5), 300]
ITL = ",".join(map(str, GAPS))
CYCLE_S = sum(GAPS) / 1e3
TTFT_S = 1.0


def arms(workloads: str, flags: str = "", rounds: int = 1, slots: int = 4) -> str:
    py = sys.executable
    start = f'[{py}, {REFSERVER}, --port, "{{port}}", --slots, "{slots}"{flags}]'
    return f"""
rounds: {rounds}
seed: 3
warmup: 0
defaults: {{preset: llama.cpp, ready: {{timeout: 20}}, stop_grace: 3}}
arms:
  - {{name: a, start: {start}}}
  - {{name: b, start: {start}}}
workloads:
{workloads}"""


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]


def test_percentiles_match_the_known_delays(tmp_path: Path, results: Path) -> None:
    wl = """
  - name: load
    load: {concurrency: [4], requests: 8, prompt_tokens: 64, output_tokens: 21}
    slo: {ttft_ms: 1}
"""
    path = write_arms(tmp_path / "arms.yaml", arms(wl, f', --ttft, "{TTFT_S}", --itl-ms, "{ITL}"'))
    r = abbench("run", str(path), "--results", str(results), "--plain")
    assert r.returncode == 0, r.stderr
    assert "| load c=4 output (tok/s) |" in r.stdout and "| load c=4 TTFT p99 (ms) |" in r.stdout
    assert "| load c=4 goodput share | 0.000 |" in r.stdout  # nobody meets 1 ms: no error
    run = only_run(results)
    report = (run / "report.md").read_text()  # the notes, under the table
    assert "Load ITL: every chunk carried one token" in report
    assert "[sweep.png](sweep.png)" in report
    assert (run / "sweep.png").stat().st_size > 10_000
    recs = records(run)
    samples = [s for s in recs if s["type"] == "sample"]
    assert len(samples) == 2 and all(s["valid"] for s in samples)
    for s in samples:
        m = s["metrics"]
        for q in (50, 90, 99):  # the known values: the same percentile of the gaps
            want = percentile([float(g) for g in GAPS] * 8, q)
            assert m[f"load_itl_p{q}_ms"] == pytest.approx(want, rel=0.05), (q, m)
            assert m[f"load_ttft_p{q}_ms"] == pytest.approx(TTFT_S * 1e3, rel=0.05), m
        e2e = (TTFT_S + CYCLE_S) * 1e3
        assert m["load_e2e_p50_ms"] == pytest.approx(e2e, rel=0.05)
        # 8 requests of 21 tokens in two waves of four
        assert m["load_output_tok_s"] == pytest.approx(8 * 21 / (2 * e2e / 1e3), rel=0.05)
        assert m["load_goodput"] == 0.0 and m["load_failed"] == 0.0
        assert s["warmup"] == 4 and s["requests"] == 8
    # every request is stored, warm-up marked: any percentile can be recomputed
    reqs = [x for x in recs if x["type"] == "load_request"]
    assert len(reqs) == 2 * (4 + 8)
    for s in samples:
        mine = [x for x in reqs if x["slot"] == s["slot"]]
        assert aggregate(mine, {"ttft_ms": 1})[0] == s["metrics"]
    assert no_server_left(run)


def test_open_loop_arrivals_keep_the_requested_rate(tmp_path: Path, results: Path) -> None:
    wl = """
  - name: open
    load: {requests: 60, prompt_tokens: 16, output_tokens: 4,
           arrival: {rate: [20], process: constant}}
  - name: poisson
    load: {requests: 60, prompt_tokens: 16, output_tokens: 4,
           arrival: {rate: [20], process: poisson}}
"""
    path = write_arms(tmp_path / "arms.yaml", arms(wl, ', --rate, "0"', slots=64))
    r = abbench("run", str(path), "--results", str(results), "--plain")
    assert r.returncode == 0, r.stderr
    recs = records(only_run(results))
    samples = [s for s in recs if s["type"] == "sample"]
    assert len(samples) == 4 and all(s["valid"] for s in samples)
    for s in samples:  # sends over the window: the first measured request to the last
        assert s["sent_req_s"] == pytest.approx(20.0, rel=0.05), s
        assert s["send_late_ms_p99"] < 200, s
        assert "load_goodput" not in s["metrics"]
    # the same send times for both arms of a round (seeded by the round, not the slot)
    reqs = [x for x in recs if x["type"] == "load_request" and x["workload"].startswith("p")]
    sched = {arm: [x["t_sched"] for x in reqs if x["arm"] == arm] for arm in ("a", "b")}
    assert sched["a"] == sched["b"] and len(set(sched["a"])) == 61
    assert "asked for" not in (only_run(results) / "report.md").read_text()  # no rate warning


def test_failed_requests_are_counted_and_a_timeout_bounds_the_load(
        tmp_path: Path, results: Path) -> None:
    wl = """
  - name: load
    load: {concurrency: [2], requests: 6, warmup: 0, prompt_tokens: 16, output_tokens: 8}
  - name: slow
    load: {concurrency: [2, 4], requests: 4, prompt_tokens: 16, output_tokens: 400,
           timeout: 1.5}
"""
    path = write_arms(tmp_path / "arms.yaml",
                      arms(wl, ', --rate, "100", --fault, http500, --fault-every, "3"'))
    r = abbench("run", str(path), "--results", str(results), "--plain")
    assert r.returncode == 0, r.stderr
    recs = records(only_run(results))
    ok = [s for s in recs if s["type"] == "sample" and s["workload"] == "load c=2"]
    assert len(ok) == 2 and all(s["valid"] for s in ok)
    assert all(s["metrics"]["load_failed"] == 2 for s in ok)  # requests 3 and 6 of 6
    assert all("2 of 6 requests failed: HTTP 500" in s["reason"] for s in ok)
    assert "Load requests left out of the percentiles: " in \
        (only_run(results) / "report.md").read_text()
    cut = [s for s in recs if s["type"] == "sample" and s["workload"].startswith("slow")]
    assert len(cut) == 4 and not any(s["valid"] for s in cut)
    assert all("the load workload's timeout ran out" in s["reason"] for s in cut)
    slot = {x["slot"]: x for x in recs if x["type"] == "slot"}
    assert all(x["status"] == "ok" for x in slot.values())
    # 400 tokens at 100/s take 4 s; the two levels of one life had 1.5 s between them
    for s in (x for x in cut if x["workload"] == "slow c=2"):
        life = [x for x in recs if x["type"] == "load_request" and x["slot"] == s["slot"]
                and x["workload"].startswith("slow")]
        assert all(x["status"] == "failed" and x["reason"].startswith(("cut", "not sent"))
                   for x in life)
        assert s["wall_s"] < 2.5
