"""Collectors against the real llama-server (started with --metrics): the counter
rates agree with the server's own per-request timings, and the RSS collector
reports the server's memory."""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
import subprocess
import urllib.request
from pathlib import Path

import psutil
import pytest

from abbench.campaign.runner import Campaign, RunOptions
from abbench.collectors.memory import MIB, TreeSampler
from abbench.config.loader import load_config
from tests.conftest import llama_start, no_process_left, started_pids, write_arms
from tests.faultkit import wait_for


def test_counter_rates_match_the_servers_own_timings(real_parts: dict[str, str],
                                                     tmp_path: Path, results: Path) -> None:
    tag = f"abbench-collectors-{tmp_path.name}"
    argv = llama_start(real_parts, "--alias", tag, "--metrics", "--slot-save-path",
                       str(tmp_path), ctx=1024)
    arms = write_arms(tmp_path / "arms.yaml", f"""
        rounds: 1
        warmup: 1
        defaults:
          preset: llama.cpp
          ready: {{timeout: 120}}
          preset_fields: {{flush_path: "/slots/0?action=erase"}}
        arms:
          - {{name: a, start: {json.dumps(argv)}}}
          - {{name: b, start: {json.dumps(argv)}}}
        workloads:
          - contexts: [256, 512]
            decode_tokens: 32
        collectors:
          - {{kind: flush}}
          - {{kind: rss, period_ms: 20}}
          - {{kind: prometheus}}
          - kind: prometheus
            name: server_decoded_per_token
            counter: llamacpp:tokens_predicted_total
          - {{kind: response_field, name: misses_per_token_timings}}
          - kind: log_regex
            name: misses_per_token_log
            pattern: 'prompt eval time = +[0-9.]+ ms / +([0-9]+) tokens'
    """)
    out = Campaign(load_config(arms), RunOptions(results=results)).execute()
    assert no_process_left(started_pids(servers=True))
    recs = [r.data() for r in out.run.records()]
    slots_ok = {r["slot"] for r in recs if r["type"] == "slot" and r["status"] == "ok"}
    assert slots_ok, "no server life completed"
    checked = 0
    for slot in slots_ok:
        for row in ("decode 256", "decode 512"):
            samples = [r for r in recs if r.get("slot") == slot and r.get("workload") == row
                       and r["type"] == "sample" and "collector" not in r]
            if not samples or not all(r["valid"] for r in samples):
                continue  # a request lost to the shared machine: nothing to compare
            prompt_n = sum(r["timings"]["prompt_n"] for r in samples)
            predicted_n = sum(r["timings"]["predicted_n"] for r in samples)
            decoded = sum(r["completion_tokens"] for r in samples)
            assert predicted_n == decoded == 32 * len(samples)

            def metric(name: str, slot: int = slot, row: str = row) -> list[float]:
                return [r["metrics"][name] for r in recs if r.get("slot") == slot
                        and r.get("workload") == row and name in r.get("metrics", {})]

            # misses/token from /metrics = the server's timings: prompt_n / predicted_n
            assert metric("misses_per_token") == [pytest.approx(prompt_n / predicted_n)]
            assert metric("server_decoded_per_token") == [pytest.approx(1.0)]
            assert metric("misses_per_token_log") == [pytest.approx(prompt_n / predicted_n)]
            per_request = [(r["timings"]["prompt_n"]) / r["completion_tokens"] for r in samples]
            assert metric("misses_per_token_timings") == pytest.approx(per_request)
            checked += 1
            rss = metric("peak_rss_mib")
            assert len(rss) == 1 and 50 < rss[0] < 4096
        life = [r["metrics"]["peak_rss_mib"] for r in recs if r.get("slot") == slot
                and r.get("workload") == "server" and r.get("collector") == "rss"]
        rows = [r["metrics"]["peak_rss_mib"] for r in recs if r.get("slot") == slot
                and r.get("collector") == "rss" and r.get("window") == "workload"]
        assert len(life) == 1 and all(life[0] >= v for v in rows)
    assert checked >= 1
    flushes = [r for r in recs if r["type"] == "flush" and r["slot"] in slots_ok]
    assert len(flushes) == 2 * len(slots_ok) and all(r["ok"] for r in flushes)
    assert "| decode 256 misses/token |" in out.report_md
    assert "| peak RSS (MiB) |" in out.report_md


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            return bool(r.status == 200)
    except (OSError, ValueError):  # refused, 503 while loading (HTTPError), cut
        return False


def test_rss_collector_reports_the_servers_memory(real_parts: dict[str, str],
                                                  tmp_path: Path) -> None:
    """Through a shell parent (a process tree): the sampler's peak covers the server's
    own RSS, read independently with psutil, and not much more."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [a.replace("{host}", "127.0.0.1").replace("{port}", str(port))
            for a in llama_start(real_parts, "--alias", f"rss-{tmp_path.name}", ctx=512)]
    shell = subprocess.Popen(["/bin/sh", "-c", shlex.join(argv) + "; true"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sampler = TreeSampler(shell.pid, 0.02, None, rss=True)
    try:
        server = wait_for(lambda: next(iter(psutil.Process(shell.pid).children()), None),
                          300, "the server under the shell")
        wait_for(lambda: _healthy(port), 300, "the model loaded (/health answers 200)")
        sampler.start()
        w = sampler.open()
        wait_for(lambda: sampler.windows[w].samples >= 5, 300, "five samples")
        own = server.memory_info().rss + psutil.Process(shell.pid).memory_info().rss
        peaks = sampler.close(w)
    finally:
        sampler.stop()
        killed: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(shell.pid).children(recursive=True):  # before the shell
                p.kill()
                killed.append(p)
        shell.kill()
        shell.wait(timeout=10)
        # SIGKILL lands at once but a process with 100 MiB mapped takes a moment to exit
        # (a cold CI run found the server still running right after the shell's wait)
        psutil.wait_procs(killed, timeout=30)
    assert no_process_left(started_pids())
    assert peaks.rss is not None and peaks.samples >= 5
    assert own * 0.9 <= peaks.rss <= own * 1.3 + 32 * MIB
    assert peaks.rss > 50 * MIB  # the 94 MiB model is in memory
