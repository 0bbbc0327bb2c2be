"""Variance components (within a server life, between lives) and the reps/rounds plan
of ``abbench calibrate``: on synthetic records with known components, by hand on small
groups, and on the real H200 A/A run (tests/golden/runs/h200-aa-32k)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from abbench.model.records import parse_records
from abbench.report.compare import run_table
from abbench.report.noise_floor import NoiseSources, noise_sources, render_noise_sources
from abbench.report.table import Table
from abbench.stats.paired import rounds_needed
from abbench.stats.variance import (
    Components,
    LifeTiming,
    RepsPlan,
    cheapest,
    life_timing,
    one_way,
    plan_reps,
    plan_run,
    pooled,
    rep_values,
    row_components,
)
from abbench.store.run import Run
from tests.unit.test_golden import RUNS, check_golden


def _lives(n_lives: int, reps: int, sb: float, sw: float, *, mu: float = math.log(500),
           seed: int = 1) -> list[list[float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n_lives):
        b = rng.gauss(0, sb)
        out.append([mu + b + rng.gauss(0, sw) for _ in range(reps)])
    return out


@pytest.mark.parametrize(("sb", "sw"), [(0.04, 0.02), (0.01, 0.03), (0.03, 0.03)])
def test_known_components_are_recovered(sb: float, sw: float) -> None:
    c = one_way(_lives(600, 4, sb, sw, seed=int(sb * 1e4 + sw * 1e6)))
    assert c.lives == 600 and c.n == 2400 and c.reps == 4
    assert c.df_within == 1800 and c.df_between == 599
    assert c.sigma_within == pytest.approx(sw, rel=0.05)
    assert c.sigma_between == pytest.approx(sb, rel=0.12)
    assert c.between_share == pytest.approx(sb**2 / (sb**2 + sw**2), abs=0.06)


def test_mean_squares_by_hand() -> None:
    groups = [[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]]
    c = one_way(groups)
    # within: (1+0+1) + (4+1+9) over 6-2 df; between: 3*((2-4)^2+(6-4)^2) over 1 df
    assert c.ms_within == pytest.approx(16 / 4)
    assert c.ms_between == pytest.approx(24.0)
    assert c.var_between == pytest.approx((24 - 4) / 3)
    ys = np.concatenate([np.array(g) for g in groups])  # the same by numpy
    assert c.ms_within is not None and c.ms_between is not None
    assert c.ms_within * 4 + c.ms_between * 1 == pytest.approx(((ys - ys.mean()) ** 2).sum())


def test_unbalanced_lives_use_n0() -> None:
    c = one_way([[0.0, 0.1], [0.2, 0.1, 0.3, 0.0], [0.5, 0.4, 0.6]])
    n, sizes = 9, [2, 4, 3]
    assert c.reps == pytest.approx((n - sum(k * k for k in sizes) / n) / 2)


def test_between_is_clipped_at_zero_and_one_rep_has_no_within() -> None:
    flat = one_way([[0.0, 0.5], [0.5, 0.0], [0.25, 0.25]])  # means equal, reps spread
    assert flat.var_between == 0.0 and flat.between_share == 0.0
    single = one_way([[0.1], [0.2], [0.3]])
    assert single.var_within is None and single.sigma_between is None
    assert plan_reps(single, effect=0.02, timing=None) == []


def test_arms_pool_about_their_own_means() -> None:
    a, b = _lives(40, 3, 0.03, 0.02, seed=3), _lives(40, 3, 0.03, 0.02, seed=4)
    shifted = [[y + 0.5 for y in g] for g in b]  # another level: not between-life noise
    p = pooled([a, shifted])
    assert p.lives == 80 and p.df_between == 78
    assert p.var_between == pytest.approx(pooled([a, b]).var_between)


def _reps(plan: RepsPlan | None) -> int:
    assert plan is not None
    return plan.reps


def test_log_ratio_sd_and_plans() -> None:
    c = Components(lives=20, n=60, reps=3, df_within=40, df_between=19,
                   ms_within=0.02**2, ms_between=0.02**2 + 3 * 0.04**2)
    assert c.var_between == pytest.approx(0.04**2)
    assert c.log_ratio_sd(4) == pytest.approx(math.sqrt(2 * (0.04**2 + 0.02**2 / 4)))
    cheap_lives = LifeTiming(lives=20, life_s=0, overhead_s=1.0, rep_s={"r": 4.0}, reps=3)
    plans = plan_reps(c, effect=0.02, timing=cheap_lives)
    assert [p.reps for p in plans] == list(range(1, 9))
    for p in plans:
        assert p.rounds is not None and p.rounds == rounds_needed(p.sigma, math.log1p(0.02))
        assert p.seconds == pytest.approx(p.rounds * 2 * (1.0 + p.reps * 4.0))
    assert _reps(cheapest(plans)) == 1  # lives are cheap and most noise is between them
    # slow starts (a large model loads for minutes), within-life noise dominant: more reps
    w = Components(lives=20, n=60, reps=3, df_within=40, df_between=19,
                   ms_within=0.05**2, ms_between=0.05**2 + 3 * 0.005**2)
    slow = LifeTiming(lives=20, life_s=0, overhead_s=300.0, rep_s={"r": 2.0}, reps=3)
    assert _reps(cheapest(plan_reps(w, effect=0.02, timing=slow))) == 8
    assert _reps(cheapest(plan_reps(w, effect=0.02, timing=None))) == 8  # fewest rounds


def test_the_whole_run_is_decided_by_the_noisiest_row() -> None:
    quiet = Components(20, 60, 3, 40, 19, 0.01**2, 0.01**2 + 3 * 0.01**2)
    loud = Components(20, 60, 3, 40, 19, 0.03**2, 0.03**2 + 3 * 0.03**2)
    t = LifeTiming(lives=20, life_s=0, overhead_s=5.0, rep_s={"a": 1.0, "b": 1.0}, reps=3)
    plans = {"a": plan_reps(quiet, effect=0.02, timing=t),
             "b": plan_reps(loud, effect=0.02, timing=t)}
    best = plan_run(plans, timing=t)
    assert best == cheapest(plans["b"])


# ------------------------------------------------------------------ records


def _records(lives: list[tuple[str, int, list[float]]], *, overhead: float = 2.0,
             rep_s: float = 1.5) -> list[dict[str, Any]]:
    """Slot and sample records of server lives: (arm, round, rep values)."""
    out: list[dict[str, Any]] = []
    t = 1_000.0
    for slot, (arm, rnd, vals) in enumerate(lives):
        base = {"slot": slot, "arm": arm, "round": rnd, "position": slot % 2}
        t_start = t
        t += overhead / 2
        for rep, v in enumerate(vals):
            out.append({**base, "type": "sample", "rep": rep, "workload": "decode 1K",
                        "t": t, "t_last_s": rep_s - 0.01, "valid": True, "status": "ok",
                        "metrics": {"decode_tok_s": v}})
            t += rep_s
        out.append({**base, "type": "sample", "workload": "server", "collector": "vram",
                    "valid": True, "metrics": {"peak_vram_mib": 900.0}})
        t += overhead / 2
        out.append({**base, "type": "slot", "status": "ok", "t_start": t_start, "t_end": t})
    return out


def test_rep_values_and_life_timing_from_records() -> None:
    recs = _records([("a", 0, [500, 510]), ("b", 0, [505, 495]), ("a", 1, [520, 530]),
                     ("b", 1, [480, 470])])
    recs.append({"slot": 9, "arm": "a", "round": 1, "type": "sample", "rep": 2,
                 "workload": "decode 1K", "t": 0, "valid": False, "metrics": {
                     "decode_tok_s": 1.0}})
    vals = rep_values(parse_records(recs))
    assert vals[("decode 1K", "decode_tok_s")] == {"a": {0: [500, 510], 1: [520, 530]},
                                                  "b": {0: [505, 495], 1: [480, 470]}}
    assert ("server", "peak_vram_mib") not in vals  # one value per life, no reps
    t = life_timing(parse_records(recs))
    assert t is not None and t.lives == 4 and t.reps == 2
    assert t.life_s == pytest.approx(5.0)
    assert t.rep_s == {"decode 1K": pytest.approx(1.5, abs=0.01)}
    assert t.overhead_s == pytest.approx(2.0, abs=0.02)
    per, pool = row_components(vals[("decode 1K", "decode_tok_s")])
    assert set(per) == {"a", "b"} and pool.lives == 4


def test_synthetic_run_end_to_end() -> None:
    rng = random.Random(7)
    lives = []
    for rnd in range(60):
        for arm in ("a", "b"):
            level = 500 * math.exp(rng.gauss(0, 0.03))
            lives.append((arm, rnd, [level * math.exp(rng.gauss(0, 0.015)) for _ in range(3)]))
    by_arm = rep_values(parse_records(_records(lives)))[("decode 1K", "decode_tok_s")]
    per, pool = row_components(by_arm)
    assert pool.sigma_within == pytest.approx(0.015, rel=0.1)
    assert pool.sigma_between == pytest.approx(0.03, rel=0.2)
    for c in per.values():
        assert c.lives == 60 and c.reps == 3


# ------------------------------------------------------------------ the H200 A/A run


@pytest.fixture(scope="module")
def h200() -> tuple[Table, NoiseSources]:
    run = Run(Path(RUNS / "h200-aa-32k"))
    table = run_table(run)
    return table, noise_sources(table, run.records(), run.meta(), effect=0.02)


def test_h200_components(h200: tuple[Table, NoiseSources]) -> None:
    """8 rounds x 3 reps at 32K: reps vary ~2-3% within a life, lives ~3-4% apart."""
    _table, ns = h200
    rows = {r.row: r for r in ns.rows}
    assert set(rows) == {"decode 32K (128 tok) (tok/s)", "decode 32K (512 tok) (tok/s)"}
    assert ns.skipped == ["peak VRAM (MiB)"]
    short, long_ = rows["decode 32K (128 tok) (tok/s)"], rows["decode 32K (512 tok) (tok/s)"]
    assert short.pooled.lives == 16 and short.pooled.reps == 3
    assert short.pooled.sigma_within == pytest.approx(0.0282, abs=5e-4)
    assert short.pooled.sigma_between == pytest.approx(0.0387, abs=5e-4)
    assert long_.pooled.sigma_within == pytest.approx(0.0272, abs=5e-4)
    assert long_.pooled.sigma_between == pytest.approx(0.0281, abs=5e-4)
    assert ns.timing is not None and ns.timing.lives == 16
    assert ns.timing.overhead_s == pytest.approx(1.36, abs=0.05)
    assert ns.run_plan is not None and ns.run_plan.reps == 1  # a life costs 1.4 s here


def test_h200_noise_golden(h200: tuple[Table, NoiseSources]) -> None:
    table, ns = h200
    check_golden("calibrate-noise.md", render_noise_sources(ns, effect=0.02,
                                                            labels=table.labels))
