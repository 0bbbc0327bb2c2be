"""Speculative decoding on the real llama-server (SmolLM2-135M, one thread): n-gram
drafting and SmolLM2 drafting one token for itself (``-md``, ``draft-simple``) against
none, on code edits whose answers repeat the code they quote (the built-in ``code-edit``
set) and on nonce prompts of random words. The acceptance rows come per prompt set, code
edits above nonce for both kinds of drafts, and the decode rows are compared: the
self-drafting arm's are decided (a forward pass of the same model per drafted token
costs it 60-75% of its speed), the n-gram arm's (-4% to -17%) only on a quiet machine
(docs/serving.md). The servers run at nice -10 as root, ahead of the other test worker's
processes.

Requests sample (temperature 0.8, one seed), as served chat does: greedy, SmolLM2-135M
continues random words with a loop ("it is a story of the old man." again and again),
which an n-gram lookup drafts perfectly (nonce acceptance 0.79 against 0.39 for code
edits, greedy; docs/serving.md has the figures), an artefact of a tiny model decoded
greedily that no real deployment's nonce text shows; and a model drafting for itself
greedily is accepted every time (1.000), which says nothing of the prompts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from abbench.cli import app
from abbench.store.run import list_runs
from tests.conftest import llama_start, no_process_left, started_pids, write_arms


def spec_types(server: str) -> str:
    """The --spec-type line of this build's --help (the names are checked, not assumed)."""
    out = subprocess.run([server, "--help"], capture_output=True, text=True, timeout=60)
    line = next((x for x in (out.stdout + out.stderr).splitlines()
                 if x.lstrip().startswith("--spec-type")), "")
    return line


def test_acceptance_rows_per_prompt_set(tmp_path: Path, real_parts: dict[str, str]) -> None:
    help_line = spec_types(real_parts["server"])
    assert "ngram-simple" in help_line, help_line  # this build's name of the mode
    mine = ("--metrics", "--alias", str(tmp_path))  # the alias marks our processes
    none = llama_start(real_parts, *mine, ctx=1024)
    # ngram-simple looks up 12-grams by default: none repeat in a 48-token answer; a 3-gram
    # lookup proposing 8 tokens drafts on code edits (the quoted code) and seldom on
    # random words
    ngram = llama_start(real_parts, *mine, "--spec-type", "ngram-simple",
                        "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8",
                        ctx=1024)
    # SmolLM2 drafting one token for itself: greedy drafts of a sampled target are
    # accepted where the target is sure of its next token (quoted code more than random
    # words), and each costs a whole forward pass of the same model, so its decode rows
    # fall by 60-85%, beyond any noise the other test worker makes
    self_draft = llama_start(real_parts, *mine, "--spec-type", "draft-simple",
                             "-md", real_parts["model"], "-td", "1",
                             "--spec-draft-n-max", "1", ctx=1024)
    # the servers first on the CPU (as root: a negative nice), so that the other test
    # worker's server and clients take what is left: on 2 cores shared with it, the arms'
    # rounds varied by a CV of 23-27% at nice 0 and no verdict came at 3-5 rounds; at
    # nice -10, 2-12% (docs/serving.md)
    nice = -10 if os.geteuid() == 0 else 0
    arms = write_arms(tmp_path / "arms.yaml", f"""
        rounds: 3
        warmup: 1
        seed: 11
        defaults:
          preset: llama.cpp
          ready: {{timeout: 180}}
          request_extra: {{temperature: 0.8, seed: 7}}
          nice: {nice}
        arms:
          - {{name: none, start: {json.dumps(none)}}}
          - {{name: ngram, start: {json.dumps(ngram)}}}
          - {{name: self, start: {json.dumps(self_draft)}}}
        workloads:
          - contexts: [32]
            decode_tokens: 4
        speculative:
          sets: [code-edit, {{name: nonce, nonce: {{count: 4}}}}]
          prompts: 4
          max_tokens: 48
        """)
    results = tmp_path / "results"
    res = CliRunner().invoke(app, ["run", str(arms), "--results", str(results), "--plain"])
    assert res.exit_code == 0, res.output
    (run,) = list_runs(results)
    report = json.loads((run.path / "report.json").read_text())
    rows = {(r["workload"], r["metric"]): r for r in report["rows"]}
    for s in ("code-edit", "nonce"):
        for metric in ("spec_accept_rate", "spec_accept_len", "spec_drafted_per_token"):
            assert ("speculative " + s, metric) in rows, sorted(rows)
    acc = {s: rows[("speculative " + s, "spec_accept_rate")]["cells"]
           for s in ("code-edit", "nonce")}
    drafted = rows[("speculative code-edit", "spec_drafted_per_token")]["cells"]
    decode = {s: rows[("speculative " + s, "decode_tok_s")]["cells"]
              for s in ("code-edit", "nonce")}
    print("acceptance:", {s: {a: round(c["mean"], 3) for a, c in v.items()}
                          for s, v in acc.items()})
    print("drafted/token code-edit:", {a: round(c["mean"], 3) for a, c in drafted.items()})
    print("decode:", {s: {a: (round(c["mean"], 1), c.get("verdict"), c.get("change"))
                          for a, c in v.items()} for s, v in decode.items()})
    assert "none" not in acc["code-edit"]  # nothing drafted: no rate, never a 0
    # the order a deployment shows: a draft looked up in the quoted code is usually right,
    # one looked up in random words seldom; a draft model's greedy guess is right more
    # often where the target is sure of its next token
    for arm in ("ngram", "self"):
        assert acc["code-edit"][arm]["mean"] > acc["nonce"][arm]["mean"] + 0.1, acc
        assert drafted["none"]["mean"] == 0 and drafted[arm]["mean"] > 0
    # the decode rows decided: a forward pass of the draft model per drafted token costs
    # the self-drafting arm more than half its speed. The n-gram arm's rows are compared
    # (its -4% to -17% is decided at 3 rounds on a quiet machine, not beside every other
    # test: docs/serving.md)
    for s, d in decode.items():
        assert d["self"]["verdict"] == "changed", (s, d)
        assert d["self"]["comparison"]["change"] < -0.3, (s, d)
        assert d["ngram"]["verdict"] != "too_few_rounds", decode
    assert "| speculative code-edit acceptance |" in res.output
    assert no_process_left(started_pids(servers=True))
