"""abbench bisect against the reference server: commits that change its decode rate."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from abbench.campaign.bisect import _verdict
from abbench.report.compare import run_table, write_run_report
from tests.faultkit import cli
from tests.gitkit import git_arms, rate_repo
from tests.unit.test_history import make_run

ENV_KEYS = {"ABBENCH_CCACHE": "0"}


def _bisect(tmp_path: Path,
            rates: list[float]) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    shas = rate_repo(tmp_path / "repo", rates)
    arms = git_arms(tmp_path / "arms.yaml", tmp_path / "repo", {"pr": {"ref": "main"}, "x": {
        "ref": "main"}}, rounds=2)
    env = {**ENV_KEYS, "ABBENCH_BUILD_CACHE": str(tmp_path / "cache")}
    p = cli("bisect", arms, "--good", "good", "--bad", "bad", "--row", "decode 64",
            "--until-ci", "20%", "--results", tmp_path / "results", "--plain", env=env,
            timeout=600)
    return shas, p


def test_bisect_finds_the_planted_commit_in_3_steps(tmp_path: Path) -> None:
    rates = [400.0] * 6 + [100.0] * 3  # good + 8 commits; the 6th quarters the rate
    shas, p = _bisect(tmp_path, rates)
    assert p.returncode == 0, p.stderr + p.stdout
    assert f"Culprit: {shas[6]}" in p.stdout, p.stdout
    state = json.loads(next((tmp_path / "results").glob("bisect-*.json")).read_text())
    assert len(state["steps"]) <= 3
    # resumable: the same command again runs nothing and says the same
    again = cli("bisect", tmp_path / "arms.yaml", "--good", "good", "--bad", "bad",
                             "--row", "decode 64", "--results", tmp_path / "results",
                             "--plain",
                env={**ENV_KEYS, "ABBENCH_BUILD_CACHE": str(tmp_path / "cache")})
    assert f"Culprit: {shas[6]}" in again.stdout and "continuing" in again.stderr


def test_bisect_no_single_culprit(tmp_path: Path) -> None:
    rates = [400.0] * 3 + [200.0] * 3 + [100.0] * 3  # two half-steps
    _, p = _bisect(tmp_path, rates)
    assert p.returncode == 1
    assert "no single culprit" in p.stdout, p.stdout


def test_bisect_row_is_a_label_and_an_unknown_one_is_refused_before_any_build(
        tmp_path: Path) -> None:
    rate_repo(tmp_path / "repo", [400.0, 100.0])
    arms = git_arms(tmp_path / "arms.yaml", tmp_path / "repo", {"pr": {"ref": "main"}, "x": {
        "ref": "main"}}, rounds=2)
    env = {**ENV_KEYS, "ABBENCH_CACHE": str(tmp_path / "cache")}
    p = cli("bisect", arms, "--good", "good", "--bad", "bad", "--row", "decode 64K",
            "--results", tmp_path / "results", "--plain", env=env)
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [
        "Error: --row: no row 'decode 64K'",
        "hint: name one as the table labels it (the unit may be left out), or by its row id: "
        "'decode 64 (tok/s)'"], p.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "results").exists()


def test_a_step_reads_its_verdict_as_its_report_decides_it(tmp_path: Path) -> None:
    """A step's verdict is the step report's own, among the cells its table compares, not
    one re-decided with every hidden row of the run in the family: here good's two rounds
    spread 4%, the report shows bad's -74% as changed (2 cells: p 0.037, two rounds
    tested at half the level), and the ten cells of every row would read it
    inconclusive (p 0.094)."""
    extra = {m: {a: [100.0, 100.0] if a == "good" else [105.0, 112.0]
                 for a in ("good", "mid", "bad")}
             for m in ("prefill_tok_s", "server_prefill_tok_s", "startup_s", "first_ttft_ms")}
    run = make_run(tmp_path, 0, {"good": [400.0, 385.0], "mid": [401.0, 386.0],
                                 "bad": [100.0, 100.2]}, extra=extra)
    key = next(r.key for r in run_table(run).rows if r.key.metric == "decode_tok_s")
    all_rows = next(r for r in run_table(run, rows="all").rows if r.key == key)
    assert all_rows.cells["bad"].comparison.verdict == "inconclusive"  # what it read before
    write_run_report(run, run.records(), run.info())
    shown = json.loads((run.path / "report.json").read_text())
    cell = next(r for r in shown["rows"] if r["metric"] == "decode_tok_s")["cells"]["bad"]
    assert _verdict(run, key, "good", "bad") == cell["comparison"]["verdict"] == "changed"
    assert _verdict(run, key, "good", "mid") == "within_noise"
