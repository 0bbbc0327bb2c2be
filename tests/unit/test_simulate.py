"""The simulation study's own claims: its ceiling is the power of the best honest test,
and a short study through the real schedule and statistics code gives sane rates."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("simulate", ROOT / "benchmarks" / "simulate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["simulate"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def test_ceiling_is_the_power_of_the_oracle_one_sided_test(sim):
    """Monte Carlo of the Neyman-Pearson test (noise known, all rounds, one-sided 95%
    bound beyond the band) hits the analytic ceiling."""
    sc = sim.Scenario("2%", 0.02, "interleaved", 6, until_ci=0.005, max_rounds=12)
    rng = np.random.default_rng(5)
    n, sigma, trials = 12, sc.sigma, 200_000
    d = math.log1p(0.02) + rng.normal(0, sigma, (trials, n)) - rng.normal(0, sigma, (trials, n))
    se = sigma * math.sqrt(2 / n)
    lower = d.mean(axis=1) - 1.6448536 * se
    oracle = float(np.mean(lower > math.log1p(0.01)))
    assert sim.ceiling(sc) == pytest.approx(oracle, abs=0.005)
    assert sim.ceiling(sc) < 0.80  # the 80% is out of reach with 1% noise per arm
    assert sim.ceiling(sim.Scenario("aa", 0.0, "interleaved", 10)) is None


def test_short_study_through_the_real_code(sim):
    aa = sim.run_scenario(sim.Scenario("A/A", 0.0, "interleaved", 10), campaigns=200, seed=3)
    assert aa.rounds_mean == 10 and aa.changed <= 0.02 and aa.coverage >= 0.9
    seq = sim.run_scenario(sim.Scenario("AABB", 0.0, "sequential", 10), campaigns=100, seed=3)
    assert seq.changed > 0.5 and seq.coverage < 0.1  # drift read as an effect
    eff = sim.run_scenario(sim.Scenario("2%", 0.02, "interleaved", 6, until_ci=0.005,
                                        max_rounds=24), campaigns=100, seed=3)
    assert 6 < eff.rounds_mean <= 24 and eff.changed_right_sign > 0.6
