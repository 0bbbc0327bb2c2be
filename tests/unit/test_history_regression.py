"""The regression detectors as pure functions, and the index's migrations."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from abbench.stats import regression
from abbench.store.index import MIGRATIONS, open_index


def noise(n: int, seed: int, sd: float = 0.01) -> np.ndarray:
    return 100 * np.exp(np.random.default_rng(seed).normal(0, sd, n))


def history(n: int, seed: int, *, run_sd: float = 0.02, round_sd: float = 0.005,
            rounds: int = 4, step: float = 0.0, at: int = 0, bimodal: float = 0.0
            ) -> list[list[float]]:
    """``n`` runs of ``rounds`` values: each run's level moves by ``run_sd`` (between
    runs), its rounds by ``round_sd`` around it; from run ``at`` on, ``1 + step`` times
    the level; ``bimodal``: half the runs (at random) land that much higher."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        level = 100 * (1 + step if i >= at else 1.0) * math.exp(rng.normal(0, run_sd))
        if bimodal and rng.random() < 0.5:
            level *= 1 + bimodal
        out.append(list(level * np.exp(rng.normal(0, round_sd, rounds))))
    return out


def test_a_step_is_called_changed_where_it_is() -> None:
    h = history(40, 1, step=-0.10, at=25)
    (cp,) = regression.change_points(h, "higher")
    assert cp.start == 25 and cp.verdict == "changed" and cp.regression
    assert -0.12 < cp.change < -0.08 and cp.lo < cp.change < cp.hi
    (up,) = regression.change_points(h, "lower")  # lower is better: the same step is good
    assert up.verdict == "changed" and not up.regression


def test_noise_alone_is_never_called_changed() -> None:
    calls = [c for s in range(100) for c in regression.change_points(history(30, s), "higher")
             if c.verdict == "changed"]
    assert len(calls) <= 3  # 3,000 runs of 2% run-to-run noise: measured 2 (alpha 5%)


def test_a_bimodal_machine_is_not_a_series_of_steps() -> None:
    calls = [c for s in range(50) for c in regression.change_points(
        history(40, s, run_sd=0.01, bimodal=0.04), "higher") if c.verdict == "changed"]
    assert len(calls) <= 2


def test_between_run_noise_widens_what_the_rounds_alone_would_call() -> None:
    # one newest run 3% down: tight rounds (0.5%) but runs that wander by 2%
    h = history(30, 7)
    h[-1] = [v * 0.97 for v in h[-1]]
    assert all(c.verdict != "changed" for c in regression.change_points(h, "higher"))
    # no between-run wander: the rounds decide
    tight = history(30, 7, run_sd=0.0)
    tight[-1] = [v * 0.97 for v in tight[-1]]
    assert regression.change_points(tight, "higher")[-1].verdict == "changed"


def test_a_step_below_the_band_is_within_noise_or_merged() -> None:
    h = history(60, 3, run_sd=0.001, round_sd=0.001, step=-0.003, at=30)
    assert not [c for c in regression.change_points(h, "higher") if c.verdict == "changed"]


def test_the_gate_reports_only_a_worse_newest_level() -> None:
    h = history(30, 2, step=-0.08, at=20)
    step = regression.newest_regression(regression.change_points(h, "higher"), 0.05)
    assert step is not None and step.start == 20
    assert regression.newest_regression(regression.change_points(h, "higher"), 0.10) is None
    # slow for a while, then fixed: the newest level is not worse
    h = history(30, 4)
    fixed = h[:20] + [[v * 0.9 for v in r] for r in h[20:25]] + h[25:]
    cps = regression.change_points(fixed, "higher")
    assert [c.verdict for c in cps] == ["changed", "changed"]
    assert regression.newest_regression(cps, 0.05) is None


def test_ten_thousand_points_are_solved_exactly() -> None:
    v = np.log(noise(10_000, 5))
    v[6000:] += math.log(0.9)
    assert regression.segments(v) == [0, 6000]


def test_bad_values_are_refused() -> None:
    with pytest.raises(ValueError, match="run 1 has no positive"):
        regression.change_points([[1.0], [0.0]], "higher")


def test_an_older_index_is_migrated(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    db = sqlite3.connect(results / "index.sqlite", isolation_level=None)
    MIGRATIONS[0][1](db)  # an index written when only the first migration existed
    db.execute("PRAGMA user_version = 1")
    db.close()
    with open_index(results) as ix:
        assert ix.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        names = {n for (n,) in ix.db.execute("SELECT name FROM sqlite_master")}
        assert "vals_by_metric" in names


def test_unwritable_results_use_an_index_in_memory(tmp_path: Path) -> None:
    """As root, permission bits do not stop writes: a read-only tmpfs does."""
    import os
    import subprocess

    results = tmp_path / "results"
    results.mkdir()
    root = os.geteuid() == 0
    if root:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(results)],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"cannot mount a read-only tmpfs: {r.stderr}"
    else:
        results.chmod(0o555)
    try:
        with open_index(results) as ix:
            assert ix.path is None and ix.runs() == []
    finally:
        if root:
            subprocess.run(["umount", str(results)], check=True)
        else:
            results.chmod(0o755)
