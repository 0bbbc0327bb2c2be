"""abbench run --resume: what is kept, what runs again, what is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faultkit import (
    cli,
    lines,
    meta,
    only_run,
    own_refserver,
    ref_arms,
    samples,
    slots,
    wait_gone,
)


def _interrupted_run(tmp_path: Path, results: Path) -> tuple[Path, Path, Path]:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": []}, rounds=2)
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    run = only_run(results)
    # make it look interrupted after the first server life
    recs = lines(run)
    first = next(i for i, r in enumerate(recs) if r["type"] == "slot")
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[:first + 1]))
    m = meta(run)
    m["status"] = "interrupted"
    (run / "run.json").write_text(json.dumps(m))
    return arms, run, ref


def test_resume_cuts_a_half_line_and_finishes(tmp_path: Path, results: Path) -> None:
    _, run, _ref = _interrupted_run(tmp_path, results)
    kept = lines(run)
    with open(run / "samples.jsonl", "a") as f:
        f.write('{"schema": 1, "type": "sample", "arm": "a", "rou')  # killed mid-write
    p = cli("run", "--resume", run.name[:12], "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    assert "cut a half-written last line (48 bytes)" in p.stderr
    assert "resuming run" in p.stderr and "1 server lives kept, 3 to run" in p.stderr
    assert lines(run)[:len(kept)] == kept
    assert sorted((s["arm"], s["round"]) for s in slots(run) if s["status"] == "ok") == \
        [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert len(samples(run)) == 8
    assert meta(run)["status"] == "complete"
    wait_gone()


def test_resume_refuses_a_changed_arms_file(tmp_path: Path, results: Path) -> None:
    arms, run, _ = _interrupted_run(tmp_path, results)
    arms.write_text(arms.read_text().replace("rounds: 2", "rounds: 3"))
    p = cli("run", "--resume", run.name, "--results", results)
    assert p.returncode == 2
    assert f"Error: {arms.resolve()}: the arms file changed since the run started" in p.stderr
    assert "hint: restore it as it was" in p.stderr and "config.yaml" in p.stderr
    assert meta(run)["status"] == "interrupted"  # untouched


def test_resume_refuses_a_missing_arms_file(tmp_path: Path, results: Path) -> None:
    arms, run, _ = _interrupted_run(tmp_path, results)
    arms.unlink()
    p = cli("run", "--resume", run.name, "--results", results)
    assert p.returncode == 2
    assert "the run's arms file" in p.stderr and "is gone" in p.stderr


def test_resume_refuses_a_complete_run_and_bad_arguments(tmp_path: Path, results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": []}, rounds=1)
    assert cli("run", arms, "--results", results).returncode == 0
    run = only_run(results)
    p = cli("run", "--resume", run.name, "--results", results)
    assert p.returncode == 2 and "is complete: every (arm, round) pair finished" in p.stderr
    p = cli("run", arms, "--resume", run.name, "--results", results)
    assert p.returncode == 2 and "--resume takes the arms file, rounds and seed" in p.stderr
    p = cli("run", "--resume", "nope", "--results", results)
    assert p.returncode == 2 and "run 'nope' not found" in p.stderr
    p = cli("run")
    assert p.returncode == 2 and "no arms file" in p.stderr


def test_resume_refuses_a_run_still_running(tmp_path: Path, results: Path) -> None:
    _, run, _ = _interrupted_run(tmp_path, results)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "abbench"])
    try:
        m = meta(run)
        m.update(status="running", pid=other.pid)
        (run / "run.json").write_text(json.dumps(m))
        p = cli("run", "--resume", run.name, "--results", results)
        assert p.returncode == 2
        assert f"is still running (abbench pid {other.pid})" in p.stderr
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("status", ["interrupted", "failed"])
def test_nothing_left_completes_the_run(tmp_path: Path, results: Path, status: str) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": []}, rounds=1)
    assert cli("run", arms, "--results", results).returncode == 0
    run = only_run(results)
    m = meta(run)
    m["status"] = status
    (run / "run.json").write_text(json.dumps(m))
    p = cli("run", "--resume", run.name, "--results", results)
    assert p.returncode == 0, p.stderr
    assert meta(run)["status"] == "complete"
