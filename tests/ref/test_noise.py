"""``abbench calibrate`` on the reference server: the variance components and the
reps/rounds plan are printed and kept in the run folder's calibration.md."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from abbench.cli import app
from tests.conftest import refserver_start, write_arms


def _arms(tmp_path: Path, reps: int) -> Path:
    start = json.dumps(refserver_start("--rate", "800"))
    return write_arms(tmp_path / "arms.yaml", f"""
        rounds: 2
        reps: {reps}
        seed: 5
        warmup: 0
        defaults: {{preset: llama.cpp, ready: {{path: /health, timeout: 30}}}}
        arms:
          - {{name: one, start: {start}}}
          - {{name: other, start: {start}}}
        workloads:
          - contexts: [64]
            decode_tokens: 24
        """)


def test_calibrate_reports_where_the_noise_comes_from(tmp_path: Path) -> None:
    results = tmp_path / "results"
    res = CliRunner().invoke(app, ["calibrate", str(_arms(tmp_path, 2)), "--arm", "one",
                                   "--results", str(results), "--plain"])
    assert res.exit_code == 0, res.output
    kept = next(results.glob("*/calibration.md")).read_text()
    assert kept in res.output
    assert "A/A calibration of arm `one`" in kept
    assert "Where the noise comes from" in kept
    lines = kept.splitlines()
    head = lines.index("| row | arm | lives x reps | sd within a life | sd between lives | "
                       "share between |")
    assert lines[head + 2].startswith("| decode 64 (tok/s) | one | 2 x 2 | ")
    assert lines[head + 3].startswith("|  | one (twin) | 2 x 2 | ")
    assert lines[head + 4].startswith("|  | pooled | 4 x 2 | ")
    assert "A server life took" in kept and "For the whole run" in kept


def test_one_rep_says_what_to_change(tmp_path: Path) -> None:
    results = tmp_path / "results"
    res = CliRunner().invoke(app, ["calibrate", str(_arms(tmp_path, 1)), "--arm", "one",
                                   "--results", str(results), "--plain"])
    assert res.exit_code == 0, res.output
    assert "Not available: the run has 1 rep per server life: set reps: 2 or more" \
        in res.output
