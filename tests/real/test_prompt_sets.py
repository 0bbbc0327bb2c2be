"""The shipped prompt sets against the real llama-server (SmolLM2-135M): the ``ctx``
prompts' real token counts lie in the long-context band, and ``code`` and ``think``
fingerprint through the server's chat template."""

from __future__ import annotations

import json
from pathlib import Path

import requests
from typer.testing import CliRunner

from abbench.cli import app
from abbench.config.arms import resolve_arms
from abbench.config.loader import config_from_data
from abbench.config.quality import PromptItem
from abbench.model.records import FingerprintRecord
from abbench.quality.checks import load_item_file
from abbench.server.process import start_server
from abbench.store.run import list_runs
from tests.conftest import llama_start, no_process_left, started_pids, write_arms

PROMPTS = Path(__file__).resolve().parents[2] / "abbench" / "data" / "prompts"


def test_ctx_prompts_tokenize_to_8k_to_32k(tmp_path: Path, real_parts: dict[str, str]) -> None:
    cfg = config_from_data({
        "defaults": {"preset": "llama.cpp", "ready": {"timeout": 120},
                     "start": llama_start(real_parts, ctx=512)},
        "arms": [{"name": "a"}, {"name": "b"}],
        "workloads": [{"contexts": [64]}]}, source=str(tmp_path / "arms.yaml"))
    arm = resolve_arms(cfg)[0]
    f = load_item_file(PROMPTS / "ctx.yaml", PromptItem, key="prompts")
    server = start_server(arm, round_=0, log_path=tmp_path / "server.log",
                          argv_for_port=lambda port: arm.command(
                              {"port": str(port), "host": arm.host}))
    try:
        server.wait_ready()
        counts = {}
        for item in f.items:
            r = requests.post(server.base_url + "/tokenize", json={"content": item.prompt},
                              timeout=60)
            counts[item.id] = len(r.json()["tokens"])
    finally:
        server.stop()
    assert f.max_tokens is not None
    for pid, n in counts.items():  # a 32K context holds every prompt and its answer
        assert 8 * 1024 <= n <= 32 * 1024 - f.max_tokens, (pid, n)
    assert max(counts.values()) > 28 * 1024
    print("ctx prompt tokens:", counts)


def test_code_and_think_fingerprint_on_the_real_server(tmp_path: Path,
                                                       real_parts: dict[str, str]) -> None:
    start = json.dumps(llama_start(real_parts, ctx=1024))
    sets = json.dumps([str(PROMPTS / "code.yaml"), str(PROMPTS / "think.yaml")])
    arms = write_arms(tmp_path / "arms.yaml", f"""
        rounds: 1
        warmup: 0
        seed: 3
        defaults: {{preset: llama.cpp, ready: {{path: /health, timeout: 120}}}}
        arms:
          - {{name: one, start: {start}}}
          - {{name: two, start: {start}}}
        workloads:
          - contexts: [32]
            decode_tokens: 4
        fingerprints: {{sets: {sets}, max_tokens: 4}}
        """)
    results = tmp_path / "results"
    res = CliRunner().invoke(app, ["run", str(arms), "--results", str(results), "--plain"])
    assert res.exit_code == 0, res.output
    (run,) = list_runs(results)
    fps = [r.data() for r in run.records() if isinstance(r, FingerprintRecord)]
    assert sorted((r["arm"], r["set"]) for r in fps) == [
        ("one", "code"), ("one", "think"), ("two", "code"), ("two", "think")]
    assert all(r["fingerprint"] and not r["errors"] and r["prompts"] == 12 for r in fps)
    by_set = {s: {r["fingerprint"] for r in fps if r["set"] == s} for s in ("code", "think")}
    assert all(len(v) == 1 for v in by_set.values())  # the same build: the same outputs
    assert "0 of 12 cold code prompts differ" in (run.path / "report.md").read_text()
    assert no_process_left(started_pids(servers=True))
