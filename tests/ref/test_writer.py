"""One writer per run folder: abbench holds a lock on the run while it writes it; a
second ``run --resume`` of the same run (started together, or while the run goes on)
exits 2 naming the pid that holds it, and no server life is measured twice."""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from pathlib import Path

from tests.faultkit import (
    cli,
    cli_start,
    find_run,
    lines,
    meta,
    own_refserver,
    ref_arms,
    samples,
    send,
    slots,
    wait_for,
    wait_gone,
)


def _interrupted(tmp_path: Path, results: Path) -> tuple[Path, Path]:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": ["--rate", "20"], "b": ["--rate", "20"]},
                    rounds=3)
    proc = cli_start("run", arms, "--results", results, "--plain", out=tmp_path / "first")
    run = wait_for(lambda: find_run(results), 60, "the run folder")
    wait_for(lambda: slots(run), 60, "one server life")
    assert send(proc, signal.SIGINT) == 130
    assert meta(run)["status"] == "interrupted"
    return run, ref


def test_resumes_started_together_measure_each_life_once(tmp_path: Path, results: Path) -> None:
    run, _ref = _interrupted(tmp_path, results)
    procs = [cli_start("run", "--resume", run.name, "--results", results, "--plain",
                       out=tmp_path / f"resume{i}") for i in range(4)]
    codes = [p.wait(timeout=240) for p in procs]
    errs = [(tmp_path / f"resume{i}.err").read_text() for i in range(4)]
    assert sorted(codes) == [0, 2, 2, 2], (codes, errs)
    winner = procs[codes.index(0)].pid
    for code, err in zip(codes, errs, strict=True):
        assert "Traceback" not in err
        if code == 2:
            assert f"run {run.name} is still running by pid {winner}" in err, err
    ok = Counter((s["arm"], s["round"]) for s in slots(run) if s["status"] == "ok")
    assert ok and max(ok.values()) == 1, ok
    assert len(samples(run)) == 2 * 6  # 3 rounds x 2 arms x 2 contexts, none twice
    assert meta(run)["status"] == "complete"
    assert json.loads(json.dumps(lines(run)))  # every line whole
    wait_gone()


def test_a_resume_while_the_run_goes_on_is_refused_by_the_lock(tmp_path: Path,
                                                               results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": ["--rate", "20"], "b": ["--rate", "20"]},
                    rounds=3)
    proc = cli_start("run", arms, "--results", results, "--plain", out=tmp_path / "first")
    try:
        run = wait_for(lambda: find_run(results), 60, "the run folder")
        p = cli("run", "--resume", run.name, "--results", results)
        assert p.returncode == 2, p.stderr
        assert re.search(rf"still running by pid {proc.pid}\b", p.stderr), p.stderr
    finally:
        send(proc, signal.SIGINT)
    wait_gone()
