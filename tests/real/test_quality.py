"""Quality and fingerprints against the real llama-server (SmolLM2-135M, -t 1)."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

from typer.testing import CliRunner

from abbench.cli import app
from abbench.quality.fingerprints import fingerprint
from abbench.report.quality_summary import _short
from abbench.report.text import md_escape
from abbench.store.run import list_runs
from tests.conftest import ROOT, llama_start, no_process_left, started_pids, write_arms

PROMPTS = """\
name: three
prompts:
  - {id: capital, prompt: "The capital of France is"}
  - {id: fib, prompt: "def fibonacci(n):"}
  - {id: story, prompt: "Once upon a time, in a small village,"}
"""

SUITE = """\
name: mini
max_tokens: 16
items:
  - id: capital-japan
    messages: [{role: user, content: "What is the capital of Japan?"}]
    check: {contains: Tokyo}
  - id: say-ok
    messages: [{role: user, content: "Reply with exactly the word OK and nothing else."}]
    check: {exact: OK}
  - id: multiply-large
    messages: [{role: user, content: "What is 23 times 17? Answer with the number only."}]
    check: {number: 391, pick: last}
"""


def _arms(tmp_path: Path, parts: dict[str, str], tag: str, arms: dict[str, list[str]],
          extra: str, rounds: int) -> Path:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "three.yaml").write_text(PROMPTS)
    lines = "".join(
        f"  - name: {name}\n    start: "
        f"{json.dumps(llama_start(parts, '--alias', tag, *flags, ctx=512))}\n"
        for name, flags in arms.items())
    body = (f"rounds: {rounds}\nwarmup: 0\nseed: 3\ndefaults:\n  preset: llama.cpp\n"
            f"  ready: {{path: /health, timeout: 120}}\narms:\n{lines}"
            "workloads:\n  - contexts: [64]\n    decode_tokens: 4\n" + extra)
    return write_arms(tmp_path / "arms.yaml", body)


def _run(arms: Path, results: Path) -> tuple[list[dict], str]:
    res = CliRunner().invoke(app, ["run", str(arms), "--results", str(results), "--plain"])
    assert res.exit_code == 0, res.output
    (run,) = list_runs(results)
    return [r.data() for r in run.records()], (run.path / "report.md").read_text()


def test_same_build_as_two_arms(real_parts: dict[str, str], results: Path,
                                tmp_path: Path) -> None:
    """Identical fingerprints, 0 of M differ, stable in k of k cold starts; the suite and
    the external command score both arms alike; failed items show their output."""
    tag = f"abbench-q-{uuid.uuid4().hex[:8]}"
    (tmp_path / "suite.yaml").write_text(SUITE)
    example = ROOT / "arms" / "quality_example.py"
    arms = _arms(tmp_path, real_parts, tag, {"one": [], "two": []}, f"""\
quality:
  suite: suite.yaml
  command: "{sys.executable} {example} --base-url {{base_url}} --max-tokens 12"
  timeout: 120
fingerprints:
  sets: [three]
  max_tokens: 12
""", rounds=2)
    records, md = _run(arms, results)
    assert no_process_left(started_pids(servers=True))

    fps = [r for r in records if r["type"] == "fingerprint"]
    assert len(fps) == 4 and all(r["pass"] == "cold" and r["errors"] == [] for r in fps)
    assert len({r["fingerprint"] for r in fps}) == 1, fps
    outs = [r for r in records if r["type"] == "fingerprint_output" and r["arm"] == "one"
            and r["round"] == 0]
    assert [r["id"] for r in outs] == ["capital", "fib", "story"]
    assert all(r["tokens"] and r["completion_tokens"] == len(r["tokens"]) for r in outs)
    assert fps[0]["fingerprint"] == fingerprint([r["text"] for r in outs])
    fp = fps[0]["fingerprint"]
    for arm in ("one", "two"):
        assert f"| {arm} | `{fp}` | stable in 2 of 2 cold starts |" in md
    assert "0 of 3 prompts differ" in md

    scores = [r for r in records if r["type"] == "sample" and "quality" in r["metrics"]]
    assert len(scores) == 4 and {r["metrics"]["quality_total"] for r in scores} == {3}
    passed = {r["metrics"]["quality"] for r in scores}
    assert len(passed) == 1  # the same build passes the same items
    assert f"| quality score | {passed.pop()}/3 | " in md and "(±0)" in md

    cmd = [r for r in records if r["type"] == "quality_command"]
    assert len(cmd) == 4 and all(r["error"] is None and r["total"] == 5 for r in cmd)
    run_dir = list_runs(results)[0].path
    stdout = (run_dir / cmd[0]["stdout"]).read_text()
    assert json.loads(stdout.strip().splitlines()[-1]) == {"passed": cmd[0]["passed"],
                                                           "total": 5}
    assert (run_dir / cmd[0]["stderr"]).read_text().count("want ") == 5
    assert f"| quality score (command) | {cmd[0]['passed']}/5 |" in md

    failed = [r for r in records if r["type"] == "quality_item" and not r["passed"]]
    assert failed, "SmolLM2-135M fails part of the mini suite"
    first = next(r for r in failed if r["arm"] == "one")
    assert first["output"] and first["verdict"].startswith("fail: ")
    assert (f"`mini/{first['id']}` (round 0, 1): {md_escape(first['verdict'])}; output "
            f"{md_escape(_short(first['output']))}") in md


def test_kv_q4_changes_greedy_outputs(real_parts: dict[str, str], results: Path,
                                      tmp_path: Path) -> None:
    """KV cache f16 against q4_0 (flash attention on): differing counts, and abbench diff
    shows where the outputs part."""
    tag = f"abbench-q-{uuid.uuid4().hex[:8]}"
    arms = _arms(tmp_path, real_parts, tag, {
        "f16": [], "q4": ["--cache-type-k", "q4_0", "--cache-type-v", "q4_0", "-fa", "on"]}, """\
fingerprints:
  sets: [three, {name: nonce, nonce: {count: 2, words: 12}}]
  max_tokens: 16
  warm: true
""", rounds=1)
    records, md = _run(arms, results)
    assert no_process_left(started_pids(servers=True))

    texts: dict[str, dict[str, str]] = {"f16": {}, "q4": {}}
    for r in records:
        if r["type"] == "fingerprint_output" and r["set"] == "three" and r["pass"] == "cold":
            texts[r["arm"]][r["id"]] = r["text"]
    differ = [pid for pid in texts["f16"] if texts["f16"][pid] != texts["q4"][pid]]
    assert differ, texts  # measured: all three differ within 16 tokens
    assert f"{len(differ)} of 3 prompts differ: {differ[0]} (token " in md
    nonces = [r for r in records if r["type"] == "fingerprint_output" and r["set"] == "nonce"
              and r["pass"] == "cold"]
    assert len({(r["id"], r["nonce"], r["prompt"]) for r in nonces}) == 2  # same for both arms
    assert all(r["prompt"].startswith(f"Note {r['nonce']}.") for r in nonces)
    warm = [r for r in records if r["type"] == "fingerprint" and r["pass"] == "warm"]
    assert len(warm) == 4 and all(r["fingerprint"] for r in warm)
    assert "warm pass same as cold in" in md

    run = list_runs(results)[0]
    res = CliRunner().invoke(app, ["diff", run.id, "--results", str(results), "--set", "three",
                                   "--arm", "f16", "--arm", "q4"])
    assert res.exit_code == 0, res.output
    assert f"{len(differ)} of 3 prompts differ" in res.output.splitlines()[0]
    assert f"{differ[0]}: diverges at token " in res.output
    # per differing prompt: "(marked ⟦)" in its header, and the mark in both columns
    assert res.output.count("⟦") == 3 * len(differ)
    one = CliRunner().invoke(app, ["diff", run.id, "--results", str(results), "--set", "three",
                                   "--arm", "f16", "--arm", "q4", "--prompt", differ[-1]])
    assert one.exit_code == 0 and one.output.count("⟦") == 3
