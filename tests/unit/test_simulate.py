"""The simulation study's own claims: its bounds are what they say, its faster helpers
give the same comparisons as abbench.stats, its tables are what table_of and the
--until-ci loop make from the same records, and a short study gives sane rates."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from abbench.campaign.until_ci import watched_comparisons
from abbench.config.stats import StatsConfig
from abbench.model.records import parse_records
from abbench.report import table as table_mod
from abbench.report.table import table_of
from abbench.stats import cells as cells_mod
from abbench.stats import paired
from abbench.stats.stopping import look_alphas
from tests.recordkit import lives

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("simulate", ROOT / "benchmarks" / "simulate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["simulate"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def test_ceilings_are_the_power_of_the_one_sided_tests(sim):
    """Monte Carlo of the Neyman-Pearson test (noise known, one-sided 95% bound beyond
    the band) and of the one-sided t test hits the analytic ceilings."""
    rng = np.random.default_rng(5)
    n, sd_d, trials = 12, 0.01 * math.sqrt(2), 100_000
    d = math.log1p(0.02) + rng.normal(0, sd_d, (trials, n))
    band = math.log1p(0.01)
    oracle = np.mean(d.mean(axis=1) - 1.6448536 * sd_d / math.sqrt(n) > band)
    assert sim.ceiling(0.02, sd_d, n) == pytest.approx(oracle, abs=0.006)
    t_lo = d.mean(axis=1) - 1.7958848 * d.std(axis=1, ddof=1) / math.sqrt(n)  # t 0.95, 11 df
    assert sim.t_ceiling(0.02, sd_d, n) == pytest.approx(np.mean(t_lo > band), abs=0.006)
    assert sim.t_ceiling(0.02, sd_d, n) < sim.ceiling(0.02, sd_d, n) < 0.80
    assert sim.pattern_p(2) == pytest.approx(7 / 32)
    early, end = look_alphas(StatsConfig(alpha=0.05), 10)
    assert 9 * early == pytest.approx(0.01) and end == 0.05  # only verdict stops spend
    assert look_alphas(StatsConfig(alpha=0.05), 1) == (0.05, 0.05)


def _same(fast: paired.Comparison, slow: paired.Comparison) -> bool:
    """Equal in every field; the CV and drift (warnings only) to 1e-9 (np.polyfit's
    slope of constant values is 5e-15, not 0)."""
    for name in ("cv", "drift"):
        a, b = getattr(fast, name), getattr(slow, name)
        if a.keys() != b.keys() or any(
                (a[k] is None) != (b[k] is None)
                or (b[k] is not None and not math.isclose(a[k], b[k], rel_tol=1e-9,
                                                          abs_tol=1e-12)) for k in b):
            return False
    return dataclasses.replace(fast, cv={}, drift={}) == dataclasses.replace(slow, cv={},
                                                                              drift={})


def test_fast_paths_give_the_same_comparisons(sim):
    rng = np.random.default_rng(11)
    cases = []
    for n in (2, 3, 5, 6, 8):
        base = {r: 100 * math.exp(rng.normal(0, 0.01)) for r in range(n)}
        cases += [
            (base, {r: 100 * math.exp(rng.normal(0.015, 0.01)) for r in range(n)}),
            (base, {r: v * (1.3 if r == 1 else 1.02) for r, v in base.items()}),  # outlier
            ({r: 12480.0 for r in range(n)}, {r: 7458.0 for r in range(n)}),  # exact
            ({r: 256.0 for r in range(n)}, {r: 256.0 for r in range(n)}),  # exact, equal
        ]
    for alpha in (0.05, 0.0125):
        slow = [paired.compare(b, a, alpha=alpha) for b, a in cases]
        with sim.fast_paths():
            fast = [paired.compare(b, a, alpha=alpha) for b, a in cases]
        assert all(_same(f, s) for f, s in zip(fast, slow, strict=True))
    assert paired.wilcoxon_p is sim._ORIGINAL["wilcoxon_p"]  # put back


def test_tables_are_what_table_of_and_until_ci_make(sim):
    """The study's verdicts = table_of over the same values as stored records, and
    its watched cells = abbench.campaign.until_ci's. (table_of runs with the fast
    paths, which the test above checks, but once without.)"""
    rng = np.random.default_rng(3)
    settings = StatsConfig(alpha=0.05, noise_band=0.01, until_ci=0.01)
    first = True
    for layout, noise, n in ((sim.AA, sim.NOISES[4], 3), (sim.EXACT, sim.NOISES[2], 6),
                             (sim.one_cell(0.02), sim.NORMAL, 4), (sim.USERS, sim.NORMAL, 2)):
        for _ in range(2):
            with sim.fast_paths():
                o = sim.campaign(rng, layout, noise, n)
            recs, meta = lives(sim.records(layout, o.rows)), sim.meta(layout)
            with contextlib.nullcontext() if first else sim.fast_paths():
                table = table_of(parse_records(recs), meta, rows="all", settings=settings)
            first = False
            real = {(r.workload, r.metric, a): c.comparison for r in table.rows
                    for a, c in r.cells.items() if a != layout.arms[0]}
            mine = {(rd.workload, rd.metric, a): c for rd, a, c in o.cells()}
            assert real.keys() == mine.keys()
            assert all(_same(mine[k], real[k]) for k in real)  # type: ignore[arg-type]
            with sim.fast_paths():
                theirs = watched_comparisons(parse_records(recs), meta, settings)
            assert theirs == sim._watched(layout, o.rows, settings)
    assert table_mod.compare_cells is cells_mod.compare_cells


def test_short_study_through_the_real_code(sim):
    aa = sim.study_scenario(sim.Scenario("A/A", 0.0, 10), campaigns=150, seed=3)
    # 90% coverage; at 150 campaigns its Monte Carlo sd is 2.4 points
    assert aa.rounds_mean == 10 and aa.changed <= 0.03 and aa.coverage >= 0.85
    seq = sim.study_scenario(sim.Scenario("AABB", 0.0, 10, order="sequential"),
                             campaigns=60, seed=3)
    assert seq.changed > 0.5 and seq.coverage < 0.1  # drift read as an effect
    eff = sim.study_scenario(sim.Scenario("2%", 0.02, 6, until=0.005, cap=12),
                             campaigns=60, seed=3)
    assert 6 < eff.rounds_mean <= 12 and eff.right_sign > 0.5
    exact = sim.study_exact(5, 3, [2])
    assert all(v[0] == 1.0 and v[1] == 1.0 for v in exact.values())  # decided, at n = 2
    tables = sim.study_aa(lambda nz, n: 40, 3, [4])
    assert all(rate <= 0.1 and rounds == 4 for rate, rounds in tables.values())


def test_h200_shaped_tables_through_the_real_code(sim):
    """The H200-shaped table: its families are the ones compute_table gives (shown rows,
    the rest, exact cells in none), counts are tested as counts, and a short study runs."""
    layout = sim.h200()
    rng = np.random.default_rng(4)
    with sim.fast_paths():
        _n, rows = next(sim.grow(rng, layout, sim.NORMAL, 4))
    cells = sim._cells(layout, rows)
    fam = {(rd.metric, c.family) for rd, _a, c in cells}
    assert ("decode_tok_s", "table") in fam and ("server_decode_tok_s", "also") in fam
    assert ("peak_vram_mib", None) in fam and ("ttft_ms", "also") in fam
    assert all(c.kind == "counted" and not c.exact for rd, _a, c in cells if rd.items)
    assert all(c.exact and c.verdict == "changed" for rd, _a, c in cells
               if rd.metric == "peak_vram_mib")
    aa = sim.study_tables_aa(lambda n: 6, 3)
    assert all(0 <= a <= 1 and exact == 1.0 for a, _s, exact in aa.values())


def test_a_campaign_carried_on_draws_the_same_rounds_whatever_it_is_asked(sim):
    """The rounds to decide follow each stated k (study_rounds): a campaign carried on
    to 9 rounds gives the same table whether it stopped at 6 on the way or not, and the
    next campaign starts the same, so that two rules are compared on the same rounds."""
    layout = sim.h200()

    def at_nine(targets: list[int]) -> tuple[list[float | None], float]:
        rng = np.random.default_rng(5)
        with sim.fast_paths():
            it = sim.grow(rng, layout, sim.NORMAL, 3)
            next(it)
            got = it.send(targets)
            while got[0] != 9:
                got = next(it)
        changes = [cell.comparison.change for row in got[1] for cell in row.cells.values()
                   if cell.comparison is not None]
        return changes, float(rng.random())

    direct, via = at_nine([9]), at_nine([6, 9])
    assert direct == via and len(direct[0]) > 10


def test_the_doc_keeps_its_text_above_the_marker(sim, tmp_path):
    doc = tmp_path / "simulation.md"
    doc.write_text(f"# Title\n\nhand-written\n\n{sim.MARKER}\n\nold tables\n")
    sim.write_doc(doc, "new tables", "Command: x")
    want = f"# Title\n\nhand-written\n\n{sim.MARKER}\n\nCommand: x\n\nnew tables\n"
    assert doc.read_text() == want
    assert (ROOT / "docs" / "simulation.md").read_text().count(sim.MARKER) == 1


def test_the_share_decided_has_the_campaigns_standard_error(sim):
    """§0c's ± is the ratio estimator's standard error over campaigns: here campaigns
    of 2, 1 and 3 cells deciding 2, 0 and 1, so p = 3/6 and residuals 1, -0.5, -0.5."""
    f = sim.Followed(((1, True), (2, True), (3, False), (4, True), (5, False), (6, False)),
                     undecided=8, campaigns=(2, 1, 3, 0))
    assert f.decided == 0.5 and f.stated == 0.75
    assert math.isclose(f.se, math.sqrt(0.75 / 3) / 2)
    assert math.isnan(sim.Followed(((1, True),), 1, (1,)).se)
