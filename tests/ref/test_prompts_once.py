"""A workload's prompt file is read once per run: run.json keeps its digest, and a
resume refuses a prompt file edited since the run started."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from abbench.cli import app
from tests.conftest import REFSERVER, write_arms


def test_prompt_digest_is_kept_and_a_resume_checks_it(tmp_path: Path, results: Path) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 40
    (tmp_path / "prompt.txt").write_text(text)
    start = json.dumps([sys.executable, str(REFSERVER), "--port", "{port}"])
    arms = write_arms(tmp_path / "arms.yaml", f"""
        rounds: 1
        warmup: 0
        defaults: {{preset: llama.cpp, ready: {{path: /health, timeout: 30}}}}
        arms:
          - {{name: a, start: {start}}}
          - {{name: b, start: {start}}}
        workloads:
          - contexts: [64]
            decode_tokens: 8
            prompt: {{source: file, path: prompt.txt}}
        """)
    res = CliRunner().invoke(app, ["run", str(arms), "--results", str(results), "--plain"])
    assert res.exit_code == 0, res.output
    run = next(results.iterdir())
    meta = json.loads((run / "run.json").read_text())
    assert meta["prompts"] == {"decode": {"sha256": hashlib.sha256(text.encode()).hexdigest(),
                                          "chars": len(text)}}
    (tmp_path / "prompt.txt").write_text(text + "edited")
    res = CliRunner().invoke(app, ["run", "--resume", run.name, "--results", str(results)])
    assert res.exit_code == 2, res.output
    assert "the prompt file of workload 'decode' changed since the run started" in res.stderr
