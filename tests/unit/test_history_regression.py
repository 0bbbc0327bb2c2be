"""The regression detectors as pure functions, and the index's migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from abbench.stats import regression
from abbench.store.index import MIGRATIONS, open_index


def noise(n: int, seed: int, sd: float = 0.01) -> np.ndarray:
    return 100 * np.exp(np.random.default_rng(seed).normal(0, sd, n))


def test_segments_find_a_step_where_it_is() -> None:
    v = noise(40, 1)
    v[25:] *= 0.9
    assert regression.segments(v) == [0, 25]
    (step,) = regression.steps(v, "higher", 0.05)
    assert step.start == 25 and step.regression and -0.11 < step.change < -0.09
    assert not regression.steps(v, "lower", 0.05)[0].regression  # faster TTFT: good


def test_noise_has_no_steps_beyond_the_threshold() -> None:
    false_alarms = sum(regression.check_newest(noise(15, s), "higher", 0.05) is not None
                       for s in range(200))
    assert false_alarms == 0  # 1% noise never reaches 5%


def test_small_steps_below_the_threshold_are_not_regressions() -> None:
    v = noise(30, 2, sd=0.002)
    v[20:] *= 0.97
    steps = regression.steps(v, "higher", 0.05)
    assert [s.start for s in steps] == [20] and not steps[0].regression
    assert regression.check_newest(v, "higher", 0.05) is None
    assert regression.check_newest(v, "higher", 0.02) is not None


def test_newest_back_at_the_old_level_is_not_flagged() -> None:
    v = list(noise(20, 3))
    v[10:19] = [x * 0.85 for x in v[10:19]]  # slow for a while, then fixed
    assert regression.check_newest(v, "higher", 0.05) is None


def test_lookback_z_score() -> None:
    v = [*noise(12, 4), 90.0]
    f = regression.lookback(v, "higher", 0.05)
    assert f is not None and f.method == "z-score" and f.z is not None and f.z < -3
    assert f.since == 12 and f.ref == 11
    # a wide noise band: 10% is inside 3 sigma, no regression
    wide = [*noise(12, 4, sd=0.08), 90.0]
    assert regression.lookback(wide, "higher", 0.05) is None
    # two values: the threshold alone decides
    assert regression.lookback([100.0, 94.0], "higher", 0.05) is not None
    assert regression.lookback([100.0, 96.0], "higher", 0.05) is None
    assert regression.lookback([100.0], "higher", 0.05) is None


def test_ten_thousand_points_are_solved_exactly() -> None:
    v = noise(10_000, 5)
    v[6000:] *= 0.9
    assert regression.segments(v) == [0, 6000]


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
