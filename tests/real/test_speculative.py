"""Speculative decoding on the real llama-server (SmolLM2-135M, one thread): n-gram
drafting and SmolLM2 drafting for itself (-md) against none, on prompts whose answers
repeat what came before (code) and on nonce prompts of random words. The acceptance
rows come per prompt set and differ by set for the n-gram arm, the self-draft accepts
everything it drafts, and the decode row is decided.

The order is not the one expected (code above nonce): SmolLM2-135M's greedy
continuation of random words loops ("it is a story of the old man." again and again,
checked by hand on this build), so a 3-gram lookup drafts well there (acceptance 0.79
in every round), while its 48-token code answers repeat little (0.22)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from abbench.cli import app
from abbench.store.run import list_runs
from tests.conftest import llama_start, no_process_left, started_pids, write_arms

PROMPTS = Path(__file__).resolve().parents[2] / "abbench" / "data" / "prompts"


def spec_types(server: str) -> str:
    """The --spec-type line of this build's --help (the names are checked, not assumed)."""
    out = subprocess.run([server, "--help"], capture_output=True, text=True, timeout=60)
    line = next((x for x in (out.stdout + out.stderr).splitlines()
                 if x.lstrip().startswith("--spec-type")), "")
    return line


def test_acceptance_rows_per_prompt_set(tmp_path: Path, real_parts: dict[str, str]) -> None:
    help_line = spec_types(real_parts["server"])
    # this build's names of the modes (-md alone drafts nothing: draft-simple says to)
    assert "ngram-simple" in help_line and "draft-simple" in help_line, help_line
    model = real_parts["model"]
    mine = ("--metrics", "--alias", str(tmp_path))  # the alias marks our processes
    none = llama_start(real_parts, *mine, ctx=1024)
    # ngram-simple looks up 12-grams by default: none repeat in a 48-token answer; a 3-gram
    # lookup proposing 8 tokens drafts on code (identifiers, the prompt's words) and
    # seldom on random words
    ngram = llama_start(real_parts, *mine, "--spec-type", "ngram-simple",
                        "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8",
                        ctx=1024)
    draft = llama_start(real_parts, *mine, "--spec-type", "draft-simple", "-md", model, "-td",
                        "1", ctx=1024)
    arms = write_arms(tmp_path / "arms.yaml", f"""
        rounds: 3
        warmup: 1
        seed: 11
        defaults: {{preset: llama.cpp, ready: {{timeout: 180}}}}
        arms:
          - {{name: none, start: {json.dumps(none)}}}
          - {{name: ngram, start: {json.dumps(ngram)}}}
          - {{name: self-draft, start: {json.dumps(draft)}}}
        workloads:
          - contexts: [32]
            decode_tokens: 4
        speculative:
          sets: [{json.dumps(str(PROMPTS / "code.yaml"))}, {{name: nonce, nonce: {{count: 4}}}}]
          prompts: 4
          max_tokens: 48
        """)
    results = tmp_path / "results"
    res = CliRunner().invoke(app, ["run", str(arms), "--results", str(results), "--plain"])
    assert res.exit_code == 0, res.output
    (run,) = list_runs(results)
    report = json.loads((run.path / "report.json").read_text())
    rows = {(r["workload"], r["metric"]): r for r in report["rows"]}
    for s in ("code", "nonce"):
        for metric in ("spec_accept_rate", "spec_accept_len", "spec_drafted_per_token"):
            assert ("speculative " + s, metric) in rows, sorted(rows)
    acc = {s: rows[("speculative " + s, "spec_accept_rate")]["cells"] for s in ("code", "nonce")}
    print("acceptance:", {s: {a: round(c["mean"], 3) for a, c in v.items()}
                          for s, v in acc.items()})
    assert "none" not in acc["code"]  # nothing drafted: no rate, never a 0
    # the sets differ: what a speculative A/B needs its per-set rows for
    assert abs(acc["code"]["ngram"]["mean"] - acc["nonce"]["ngram"]["mean"]) > 0.2
    assert acc["code"]["self-draft"]["mean"] >= 0.9 and acc["nonce"]["self-draft"]["mean"] >= 0.9
    drafted = rows[("speculative code", "spec_drafted_per_token")]["cells"]
    print("drafted/token code:", {a: round(c["mean"], 3) for a, c in drafted.items()})
    assert drafted["none"]["mean"] == 0 and drafted["ngram"]["mean"] > 0
    decode = rows[("speculative code", "decode_tok_s")]["cells"]
    print("decode code:", {a: (round(c["mean"], 1), c.get("verdict")) for a, c in decode.items()})
    # compared like every row; on the shared 2-core machine the self-draft arm's -50% was
    # still inconclusive at 3 and 4 rounds (docs/serving.md), so the verdict is printed
    assert all(decode[a]["verdict"] != "too_few_rounds" for a in ("ngram", "self-draft"))
    assert "| speculative code acceptance |" in res.output
    assert no_process_left(started_pids(servers=True))
