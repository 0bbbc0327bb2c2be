"""The CLI against the reference server (tests/refserver.py), whose rates are known."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REFSERVER, no_process_left, no_server_left, started_pids, write_arms
from tests.faultkit import own_refserver


def arms_yaml(slow_flags: str = "", fast_flags: str = "", rounds: int = 2,
              extra: str = "", decode_tokens: int = 40, server: Path = REFSERVER) -> str:
    py = sys.executable
    return f"""
rounds: {rounds}
seed: 42
defaults:
  preset: llama.cpp
  ready: {{timeout: 20}}
  stop_grace: 3
arms:
  - name: slow
    label: "prod ecb52158"
    start: [{py}, {server}, --port, "{{port}}", --rate, "200" {slow_flags}]
  - name: fast
    label: "this PR"
    start: [{py}, {server}, --port, "{{port}}", --rate, "220" {fast_flags}]
workloads:
  - contexts: [256, 1K]
    decode_tokens: {decode_tokens}
{extra}"""


def abbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "abbench.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def only_run(results: Path) -> Path:
    (run,) = [p for p in results.iterdir() if (p / "run.json").exists()]
    return run


def test_delta_is_the_paired_change_of_the_stored_rates(tmp_path: Path, results: Path):
    """The rates measured here depend on the machine's load (how close they come to the
    servers' 200 and 220 tok/s is a benchmark's question, docs/spine-bench.md); what
    holds anywhere: each stored rate is its sample's own tokens over its own times, the
    server's rate is what the server said and never above its pace, and the table's
    change is the paired change of the stored rates."""
    arms = write_arms(tmp_path / "arms.yaml", arms_yaml(decode_tokens=200))
    r = abbench("run", str(arms), "--results", str(results), "--plain")
    assert r.returncode == 0, r.stderr
    table = r.stdout
    assert "| | prod ecb52158 | this PR |" in table
    run = only_run(results)
    records = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    samples = [x for x in records if x["type"] == "sample"]
    assert len(samples) == 2 * 2 * 2 and all(s["valid"] for s in samples)
    rate: dict[tuple[int, str, int], float] = {}
    for s in samples:
        m = s["metrics"]
        assert s["prompt_tokens"] == s["context"] and s["completion_tokens"] == 200
        assert m["decode_tok_s"] == pytest.approx(199 / (s["t_last_s"] - s["t_first_s"]),
                                                  rel=1e-12)
        # the reference server sends token i at i/rate after the first, or later
        assert m["server_decode_tok_s"] == s["timings"]["predicted_per_second"]
        assert m["server_decode_tok_s"] <= (200.0 if s["arm"] == "slow" else 220.0) * (1 + 1e-9)
        rate[s["context"], s["arm"], s["round"]] = m["decode_tok_s"]
    for ctx, label in ((256, "256"), (1024, "1K")):
        row = next(line for line in table.splitlines() if line.startswith(f"| decode {label} "))
        shown = float(re.search(r"\(([+-]\d+\.\d)%", row).group(1))
        logs = [math.log(rate[ctx, "fast", k] / rate[ctx, "slow", k]) for k in (0, 1)]
        assert shown == pytest.approx(100 * math.expm1(sum(logs) / 2), abs=0.05 + 1e-9), row
    # run prints the report's first part (the table and its summary); report.md has it
    # whole, the details after it
    assert (run / "report.md").read_text().startswith(table.rstrip("\n") + "\n")
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete" and meta["seed"] == 42
    assert (run / "logs" / "slow-r0.log").exists()
    assert all(isinstance(x.get("pid"), int) for x in records if x["type"] == "slot")
    assert no_server_left(run)  # the PIDs of the servers this run started


def test_invalid_samples_are_flagged_and_the_table_is_printed_last(tmp_path: Path,
                                                                    results: Path):
    # every second completion of the fast arm decodes 3 tokens short
    arms = write_arms(tmp_path / "arms.yaml",
                      arms_yaml(fast_flags=', --fault, short, --fault-every, "2"', rounds=1))
    # stdout and stderr into one pipe, in the order a terminal shows them
    r = subprocess.run([sys.executable, "-m", "abbench.cli", "run", str(arms), "--results",
                        str(results), "--plain"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    run = only_run(results)
    report = (run / "report.md").read_text()
    assert "Invalid samples (wrong token count or failed; left out): this PR: 1." in report
    # the terminal ends with the table and its summary line; the details (legend, notes,
    # statistics per row) stay in report.md, named with their warnings above the table
    lines = r.stdout.rstrip("\n").splitlines()
    assert lines[-1].startswith("**Summary** (▲ better, ▼ worse): this PR: "), lines[-3:]
    assert lines[-2] == "" and lines[-3].startswith("| decode 1K (tok/s) | ")
    top = next(i for i, ln in enumerate(lines) if ln.startswith("abbench run `"))
    assert report.startswith("\n".join(lines[top:]) + "\n\n")
    assert "Invalid samples" not in r.stdout and "<details>" not in r.stdout
    assert lines[top - 3:top] == [f"Stored in {run}", f"Under the table, {run / 'report.md'} "
                                  "holds the legend, notes and statistics per row; 1 "
                                  f"warning(s) among them (abbench report {run} prints it "
                                  "all)", ""]
    samples = [json.loads(line) for line in
               (only_run(results) / "samples.jsonl").read_text().splitlines()]
    bad = [s for s in samples if s["type"] == "sample" and not s["valid"]]
    assert len(bad) == 1 and "completion_tokens 37 != 40" in bad[0]["reason"]


def test_run_order_is_the_one_validate_prints(tmp_path: Path, results: Path):
    arms = write_arms(tmp_path / "arms.yaml", arms_yaml(rounds=4, decode_tokens=4))
    v = abbench("validate", str(arms), "--rounds", "4", "--seed", "9")
    assert v.returncode == 0, v.stderr
    printed = re.findall(r"round (\d+): (.+)", v.stdout)
    assert len(printed) == 4
    r = abbench("run", str(arms), "--results", str(results), "--rounds", "4", "--seed", "9",
                "--plain")
    assert r.returncode == 0, r.stderr
    meta = json.loads((only_run(results) / "run.json").read_text())
    ran: dict[int, list[str]] = {}
    for rnd, _pos, arm in meta["schedule"]:
        ran.setdefault(rnd, []).append(arm)
    assert {int(k): v.split() for k, v in printed} == ran
    slots = [json.loads(line) for line in
             (only_run(results) / "samples.jsonl").read_text().splitlines()]
    executed = [(s["round"], s["arm"]) for s in slots if s["type"] == "slot"]
    assert executed == [(rnd, a) for rnd, arms_ in ran.items() for a in arms_]


def test_validate_prints_the_plan_and_starts_nothing(tmp_path: Path):
    server = own_refserver(tmp_path)  # its own path: a process of it is this test's
    arms = write_arms(tmp_path / "arms.yaml", arms_yaml(server=server))
    r = abbench("validate", str(arms))
    assert r.returncode == 0, r.stderr
    assert "slow (baseline)" in r.stdout and "seed 42" in r.stdout
    assert "workload requests: 3 per server life (1 warm-up), 12 in all over 4 server lives" \
        in r.stdout
    assert no_process_left(started_pids())


@pytest.mark.parametrize(("change", "field"), [
    (("rounds: 2", "rounds: 2\ncolour: blue"), "colour"),
    (("rounds: 2", "rounds: [2]"), "rounds"),
    (("    start: [", "    begin: ["), "begin"),
])
def test_bad_config_exits_2_with_file_field_and_hint(tmp_path: Path, results: Path, change,
                                                      field):
    server = own_refserver(tmp_path)
    arms = write_arms(tmp_path / "bad.yaml", arms_yaml(server=server).replace(*change, 1))
    for cmd in (["validate", str(arms)], ["run", str(arms), "--results", str(results)]):
        r = abbench(*cmd)
        assert r.returncode == 2, r.stderr
        assert str(arms) in r.stderr and field in r.stderr and "hint:" in r.stderr
    assert not results.exists() or not any(results.iterdir())
    assert no_process_left(started_pids())


