"""The statistics against values computed independently (scipy, brute force), the
verdict rules, the rendering of cells, and --until-ci/calibrate on the reference
server."""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

from abbench.config.stats import StatsConfig
from abbench.model.records import parse_records
from abbench.report.formats import render_json
from abbench.report.markdown import render_markdown
from abbench.report.noise_floor import band_yaml, noise_floor, render_calibration
from abbench.report.table import table_of
from abbench.report.verdicts import legend_lines, more_rounds, render_comparison
from abbench.stats import families
from abbench.stats import paired as stats
from abbench.stats.decide import level_share
from abbench.stats.paired import compare
from abbench.stats.stopping import block_size, planned_looks, stop_reason
from tests.recordkit import lives

D = np.array([0.021, 0.034, 0.012, 0.027, 0.018, 0.041, 0.025, 0.009])


# ------------------------------------------------------------------ golden numbers


def test_t_interval_matches_scipy() -> None:
    r = stats.t_interval(D, 0.05)
    ref = sps.ttest_1samp(D, 0.0)
    ci = ref.confidence_interval(0.95)
    assert r.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert (r.lo, r.hi) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert r.mean == pytest.approx(D.mean())
    # the paired t-test on the logs is the same test
    base = np.array([50.0, 51, 49, 52, 50.5, 48, 51.5, 50])
    arm = base * np.exp(D)
    assert sps.ttest_rel(np.log(arm), np.log(base)).pvalue == pytest.approx(r.p, rel=1e-9)


def test_signed_rank_null_is_the_exact_distribution() -> None:
    for n in range(1, 9):
        brute = np.zeros(n * (n + 1) // 2 + 1)
        for signs in itertools.product((0, 1), repeat=n):
            brute[sum(r for r, s in zip(range(1, n + 1), signs, strict=True) if s)] += 1
        assert stats.signed_rank_null(n) == pytest.approx(brute / 2**n)


def test_smallest_p_is_what_scipy_can_give() -> None:
    for n in range(2, 10):
        p = sps.wilcoxon(np.arange(1, n + 1) / 100, method="exact").pvalue
        assert stats.smallest_p(n) == pytest.approx(p)
    assert stats.smallest_p(5) > 0.05 > stats.smallest_p(6)


def test_exact_wilcoxon_p_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    for n in range(2, 30):
        for _ in range(5):
            x = rng.normal(0.01, 0.02, n)
            assert stats.wilcoxon_p(x) == pytest.approx(
                sps.wilcoxon(x, method="exact").pvalue, rel=1e-9)
    tied = np.array([0.01, 0.01, -0.02, 0.03, 0.0, 0.02])
    assert stats.wilcoxon_p(tied) == pytest.approx(sps.wilcoxon(tied).pvalue)


def test_hodges_lehmann_and_its_interval_invert_the_wilcoxon_test() -> None:
    w = stats.wilcoxon_hl(D, 0.05)
    walsh = [(D[i] + D[j]) / 2 for i in range(len(D)) for j in range(i, len(D))]
    assert w.hl == pytest.approx(float(np.median(walsh)))
    assert w.p == pytest.approx(sps.wilcoxon(D, method="exact").pvalue)
    eps = 1e-9

    def p_at(theta: float) -> float:
        return float(sps.wilcoxon(D - theta, method="exact").pvalue)

    assert p_at(w.lo - eps) < 0.05 <= p_at(w.lo + eps)
    assert p_at(w.hi + eps) < 0.05 <= p_at(w.hi - eps)


def test_hl_interval_is_unbounded_when_alpha_is_unreachable() -> None:
    w = stats.wilcoxon_hl(D[:4], 0.05)
    assert math.isinf(w.lo) and math.isinf(w.hi)


def test_holm_by_hand_kept_for_the_docs() -> None:
    # sorted: .005*4=.02, .01*3=.03, .03*2=.06, .04*1=.04 -> running max .06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5]) == [0.5]


def test_rounds_needed_matches_the_notes() -> None:
    # statistics.md: sigma 2%, delta 2% -> about 8 with z (2.8^2), 10 with the t correction
    z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)  # the 2.8 of the notes
    assert math.ceil((z * 0.02 / 0.02) ** 2) == 8
    n = stats.rounds_needed(0.02, 0.02)
    assert n == 10
    k = sps.t.ppf(0.975, n - 1) + sps.t.ppf(0.8, n - 1)
    k_prev = sps.t.ppf(0.975, n - 2) + sps.t.ppf(0.8, n - 2)
    assert k * 0.02 / math.sqrt(n) <= 0.02 < k_prev * 0.02 / math.sqrt(n - 1)


def test_outliers_and_drift_and_cv() -> None:
    rounds = list(range(8))
    vals = [50.0, 50.2, 49.9, 50.1, 60.0, 50.0, 49.8, 50.3]
    assert stats.outlier_rounds(rounds, vals) == [4]
    z = stats.modified_z(vals)
    med = np.median(vals)
    assert z[4] == pytest.approx(0.6745 * (60 - med) / sps.median_abs_deviation(vals))
    grow = [100 * 1.05 ** (r / 7) for r in rounds]  # +5% across the run
    assert stats.drift(rounds, grow) == pytest.approx(0.05, rel=1e-9)
    assert stats.cv([1.0, 1.3, 0.8]) == pytest.approx(np.std([1, 1.3, 0.8], ddof=1) / np.mean(
        [1, 1.3, 0.8]))


# ------------------------------------------------------------------ verdicts


def _pair(d: np.ndarray, base: float = 50.0) -> tuple[dict[int, float], dict[int, float]]:
    b = {r: base * (1 + 0.001 * ((r * 7) % 5 - 2)) for r in range(len(d))}
    return b, {r: b[r] * math.exp(x) for r, x in enumerate(d)}


def test_verdict_changed_with_direction() -> None:
    b, a = _pair(D + 0.02)
    c = compare(b, a, direction="higher")
    assert c is not None and c.verdict == "changed" and c.better is True and c.mark == "▲"
    assert c.change == pytest.approx(math.expm1(np.mean(D + 0.02)))
    assert c.test.startswith("paired t")
    worse = compare(b, a, direction="lower")
    assert worse is not None and worse.verdict == "changed" and worse.mark == "▼"


def test_verdict_within_noise_inconclusive_too_few() -> None:
    small = np.array([0.001, -0.002, 0.0015, 0.0, -0.001, 0.002, 0.0005, -0.0005])
    c = compare(*_pair(small))
    assert c is not None and c.verdict == "within_noise" and c.mark == "≈"
    noisy = np.array([0.05, -0.04, 0.03, -0.02, 0.06, -0.05, 0.01, 0.02])
    c = compare(*_pair(noisy))
    assert c is not None and c.verdict == "inconclusive"
    # 5 rounds of a huge effect: the t interval is valid from 2 rounds and decides it
    # (the signed-rank test's 2/2^5 floor no longer gates a verdict)
    c = compare(*_pair(np.full(5, 0.3) + np.arange(5) * 0.001))
    assert c is not None and c.verdict == "changed" and c.test.startswith("paired t")
    # one round: no interval, no verdict
    c = compare(*_pair(np.array([0.3])))
    assert c is not None and c.verdict == "too_few_rounds" and c.rounds_needed is None
    assert render_comparison(c) == "(+35.0%) ? needs a 2nd round to show its noise"


def test_outlier_in_d_is_flagged_and_the_t_interval_stays_the_estimate() -> None:
    d = D.copy()
    d[3] = 0.5
    c = compare(*_pair(d))
    assert c is not None and c.test.startswith("paired t") and c.outliers["d"] == [3]
    assert c.change == pytest.approx(math.expm1(np.mean(d)))
    assert c.hl == pytest.approx(math.expm1(stats.wilcoxon_hl(d).hl))


def test_wilcoxon_alone_cannot_say_changed_when_t_disagrees() -> None:
    """A real A/A run (llama-server on a loaded 2-core VM, the same arm twice): the twin
    came out ahead in all six rounds, two log-ratios were flagged as outliers, and the
    Wilcoxon test (p = 2/64) with its HL interval cleared the band. At alpha 2.5% the t
    test does not (p of "beyond the band" 0.035): the t test decides, inconclusive, not
    changed. (At 5% it clears: the verdict corpus has this case.)"""
    base = dict(enumerate([51.201, 54.709, 49.954, 61.22, 69.28, 70.355]))
    twin = dict(enumerate([52.556, 63.27, 52.874, 70.158, 71.023, 72.256]))
    c = compare(base, twin, alpha=0.025)
    assert c is not None and c.test.startswith("paired t") and c.outliers["d"] == [1, 3]
    assert c.wilcoxon_p == pytest.approx(2 / 64) and c.hl_lo is not None and c.hl_lo > 0.01
    assert c.t_lo is not None and c.t_lo < 0.01  # the t interval does not clear the band
    assert c.verdict == "inconclusive" and families.adjust([c])[0].rounds_needed is not None
    # a clear effect with one wild round: Wilcoxon alone would say changed, the t test
    # (widened by the wild round) does not: inconclusive, and the report says why
    d = D.copy()
    d[3] = 0.5
    c = compare(*_pair(d))
    assert c is not None and c.wilcoxon_p is not None and c.wilcoxon_p < 0.05
    assert c.verdict == "inconclusive" and any("disagree" in w for w in c.warnings)
    assert compare(*_pair(D)).verdict == "changed"  # without it, t decides alone


def test_benjamini_hochberg_by_hand() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4/1, x4/2, x4/3, x4/4, then running minimum
    assert stats.benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert stats.benjamini_hochberg([0.5]) == [0.5]


def test_the_adjustment_can_demote_changed() -> None:
    b, a = _pair(np.array([0.02, 0.03, 0.019, 0.025, 0.021, 0.018, 0.04, 0.011]))
    c = compare(b, a, noise_band=0.001)
    null = compare(*_pair(np.array([0.001, -0.001, 0.0005, -0.0005, 0.0, 0.0002, -0.0002,
                                    0.0001])), noise_band=0.001)
    assert c is not None and null is not None and c.verdict == "changed"
    assert c.p_raw is not None and 0.05 / 400 < c.p_raw < 0.05
    # cells whose estimate sits well inside the band (p near 1) do not dilute the one
    # that moved
    assert null.p_raw is not None and null.p_raw > families.SELECT
    out = families.adjust([c] + [null] * 399)
    assert out[0].verdict == "changed" and out[0].comparisons == 400
    assert out[0].p == pytest.approx(c.p_raw / families.SELECT)  # alone in the test
    # cells beyond the band but not clear of it (p 0.3) do
    beyond = replace(null, p_raw=0.3, p=0.3)
    out = families.adjust([c] + [beyond] * 399)
    assert out[0].verdict == "inconclusive" and out[0].comparisons == 400
    assert out[0].p == pytest.approx(min(1.0, 400 * c.p_raw / families.SELECT))
    assert out[0].rounds_needed is not None and out[0].rounds_needed > c.n
    # a family of one cell keeps its p
    assert families.adjust([c])[0].p == c.p_raw


def test_per_metric_noise_band() -> None:
    s = StatsConfig.model_validate({"noise_band": "1%", "noise_bands": {"ttft_ms": "5%"}})
    assert s.band("decode_tok_s") == 0.01 and s.band("ttft_ms") == 0.05


# ------------------------------------------------------------------ table and rendering


def _records(effects: dict[str, float], n: int, seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    recs = []
    for r in range(n):
        for arm, eff in effects.items():
            for rep in range(2):
                v = 52.0 * math.exp(eff + rng.normal(0, 0.004))
                recs.append({"type": "sample", "valid": True, "arm": arm, "round": r,
                             "rep": rep, "workload": "decode 32K",
                             "metrics": {"decode_tok_s": v,
                                         "ttft_ms": 900 * math.exp(-eff + rng.normal(0, 0.004))}})
    return recs


META = {"id": "t1", "arms": [{"name": "base"}, {"name": "pr", "label": "this PR"},
                             {"name": "same"}], "order": "interleaved", "seed": 1}


def test_table_cells_legend_details_and_json() -> None:
    recs = _records({"base": 0.0, "pr": 0.028, "same": 0.0}, 8)
    table = table_of(parse_records(lives(recs)), META, metrics=["decode_tok_s", "ttft_ms"])
    md = render_markdown(table)
    row = next(line for line in md.splitlines() if line.startswith("| decode 32K (tok/s)"))
    assert re.search(r"\| \d+\.\d\d-\d+\.\d\d \(\+\d\.\d% \[\+\d\.\d, \+\d\.\d\]\) ▲ \|", row)
    assert "≈" in row
    # the table's 4 shown cells are one family: TTFT is timed, so never exact
    assert "Benjamini-Hochberg within each family of cells" in md
    fams = {c.comparison.family for r in table.rows for a, c in r.cells.items()
            if a != "base" and c.comparison is not None}
    assert fams == {"table"}
    assert "<details><summary>Statistics per row</summary>" in md
    assert "paired t on log-ratios" in md
    ttft = next(line for line in md.splitlines() if line.startswith("| decode 32K TTFT"))
    assert "▲" in ttft  # lower TTFT is better
    data = json.loads(render_json(table))
    verdicts = [c["verdict"] for r in data["rows"] for a, c in r["cells"].items() if a != "base"]
    assert set(verdicts) <= set(stats.VERDICTS) and "changed" in verdicts


def test_two_rounds_decide_and_one_round_says_so_in_the_cell() -> None:
    recs = _records({"base": 0.0, "pr": 0.05, "same": 0.0}, 2)
    # n = 1: the arm's second life finished, its samples were lost
    recs = [r for r in lives(recs) if not (r["arm"] == "same" and r["round"] == 1
                                           and r["type"] == "sample")]
    table = table_of(parse_records(recs), META)
    md = render_markdown(table)
    row = next(line for line in md.splitlines() if line.startswith("| decode 32K (tok/s)"))
    assert "▲" in row.split("|")[3]  # +5% at 0.4% noise: 2 rounds decide
    assert "? needs" in row.split("|")[4] or "? about" in row.split("|")[4]  # one round: "?"

    def strict(name: str) -> None:
        raise AssertionError(f"not JSON: {name}")

    data = json.loads(render_json(table), parse_constant=strict)
    verdicts = {a: c["verdict"] for r in data["rows"] if r["metric"] == "decode_tok_s"
                for a, c in r["cells"].items() if a != "base"}
    assert verdicts == {"pr": "changed", "same": "too_few_rounds"}


def test_two_rounds_are_tested_at_half_the_level() -> None:
    """At 2 rounds a timed cell's p of "beyond the band" is doubled (server lives on two
    levels read as a change in every round: docs/statistics.md); from 3 it is the
    t test's own, and a metric that does not vary still decides at 2 rounds."""
    assert level_share(2) == 0.5 and level_share(3) == level_share(12) == 1.0
    lo, hi = stats.band_edges(0.01)
    for d, n in (([0.10, 0.12], 2), ([0.10, 0.12, 0.11], 3), ([0.02, 0.05], 2)):
        b, a = _pair(np.array(d))
        c = compare(b, a)
        assert c is not None
        x = np.log([a[r] / b[r] for r in sorted(b)])
        raw = stats.p_beyond_band(float(x.mean()), float(x.std(ddof=1)), n, hi, lo)
        assert c.p == pytest.approx(min(1.0, raw / level_share(n)))
    # +11% with the two rounds 1.5% apart: p 0.045 in the t test, 0.089 doubled
    b, a = _pair(np.array([0.10, 0.115]))
    c = compare(b, a)
    assert c is not None and 0.025 < c.p / 2 < 0.05 and c.verdict == "inconclusive"
    b, a = _pair(np.array([0.10, 0.115, 0.1075]))
    c = compare(b, a)
    assert c is not None and c.verdict == "changed"
    mem = compare({0: 100.0, 1: 100.0}, {0: 60.0, 1: 60.0}, kind="deterministic")
    assert mem is not None and mem.exact and mem.verdict == "changed"
    effects = {"base": 0.0, "pr": 0.05, "same": 0.0}
    two = "\n".join(legend_lines(table_of(parse_records(lives(_records(effects, 2))), META)))
    assert "2.5% for a timed cell of 2 rounds" in two
    three = "\n".join(legend_lines(table_of(parse_records(lives(_records(effects, 3))), META)))
    assert "of 2 rounds" not in three


def test_settings_come_from_the_run_meta() -> None:
    recs = _records({"base": 0.0, "pr": 0.028, "same": 0.0}, 8)
    table = table_of(parse_records(lives(recs)), {**META, "stats": {"noise_band": "5%"}})
    cell = table.rows[0].cells["pr"].comparison
    assert cell is not None and cell.noise_band == 0.05 and cell.verdict != "changed"


# ------------------------------------------------------------------ sequential


def test_blocks_and_looks_stay_balanced() -> None:
    assert block_size(3, 2) == 1 and block_size(4, 2) == 2 and block_size(4, 3) == 2
    assert planned_looks(3, 12, 2) == [3, 4, 6, 8, 10, 12]
    assert planned_looks(6, 11, 2) == [6, 8, 10, 11]


def test_stop_reason() -> None:
    narrow = compare(*_pair(D * 0.1))
    wide = compare(*_pair(np.array([0.05, -0.04, 0.03, -0.02, 0.06, -0.05, 0.01, 0.02])))
    assert narrow is not None and wide is not None
    assert "half-width" in (stop_reason([narrow], [narrow], target=0.01, rounds_done=8,
                                        cap=12) or "")
    assert stop_reason([wide], [wide], target=0.01, rounds_done=8, cap=12) is None
    assert "cap" in (stop_reason([wide], [wide], target=0.01, rounds_done=12, cap=12) or "")
    changed = compare(*_pair(D + 0.2))
    assert changed is not None and changed.half_width is not None
    assert "verdict" in (stop_reason([changed], [changed], target=0.001, rounds_done=8,
                                     cap=12) or "")


def test_noise_floor_from_a_synthetic_aa_table() -> None:
    recs = _records({"base": 0.0, "twin": 0.0}, 10)
    meta = {"id": "aa", "arms": [{"name": "base"}, {"name": "twin"}]}
    floors = noise_floor(table_of(parse_records(lives(recs)), meta), effect=0.02)
    (f,) = floors
    d = [math.log(b / a) for a, b in zip(*[
        [np.mean([r["metrics"]["decode_tok_s"] for r in recs if r["arm"] == arm
                  and r["round"] == k]) for k in range(10)] for arm in ("base", "twin")],
        strict=True)]
    assert f.sigma == pytest.approx(np.std(d, ddof=1))
    assert f.rounds_for_effect == stats.rounds_needed(f.sigma, math.log1p(0.02))
    assert f.suggested_band == pytest.approx(max(abs(f.lo), abs(f.hi)))
    assert "suggested band" in render_calibration(floors, arm="base", effect=0.02)
    assert "decode_tok_s:" in band_yaml(floors)


def test_negligible_wobble_is_no_outlier() -> None:
    # peak RSS of two builds, 20% apart, rounds agreeing to 0.05% (a real demo run):
    # a MAD-based z alone would call two rounds outliers and force the Wilcoxon test,
    # whose smallest p with 6 rounds cannot survive Holm; the floor keeps the t-test.
    base = dict(enumerate([250.43, 250.63, 250.58, 250.70, 250.73, 250.60]))
    arm = dict(enumerate([200.70, 200.66, 200.61, 200.70, 200.76, 200.79]))
    d = [math.log(arm[r] / base[r]) for r in base]
    assert stats.outlier_rounds(list(base), d) == [0, 5]  # the z-score alone
    c = stats.compare(base, arm, direction="lower")
    assert c is not None and c.outliers["d"] == [] and c.test == "paired t on log-ratios"
    assert c.verdict == "changed" and c.better is True and c.p < 1e-6


def test_kinds_say_which_metrics_can_be_exact() -> None:
    from abbench.stats.kinds import family, kind

    assert kind("peak_vram_mib") == "deterministic" and kind("misses_per_token_l2") == \
        "deterministic"
    assert kind("load_goodput") == kind("quality") == "counted"
    assert kind("decode_tok_s") == kind("my_collector_metric") == "sampled"
    assert family("decode_tok_s", True) == "table" and family("quality", True) == "counts"
    assert family("server_decode_tok_s", True) == family("ttft_ms", False) == "also"


def test_rounds_to_decide_is_a_probability_and_names_bimodal_noise() -> None:
    from abbench.stats.decide import bimodal_gap, decide_probability, rounds_to_decide

    lo, hi = math.log1p(-0.01), math.log1p(0.01)
    how = dict(alpha_changed=0.05, alpha_within=0.05)
    n = rounds_to_decide(0.03, 0.02, 4, lo, hi, **how)
    assert n is not None and n > 4
    grid = np.array([float(n - 1), float(n)])
    p = decide_probability(0.03, 0.02, 4, lo, hi, grid, **how)
    assert p[0] < 0.8 <= p[1]  # the smallest N with an 80% chance
    # a point solve of the sd would promise fewer rounds than its sampling distribution
    assert n >= (rounds_to_decide(0.03, 0.02, 4, lo, hi, sd_known=True, **how) or 0)
    rng = np.random.default_rng(1)
    two = np.log(np.r_[np.full(4, 100.0), np.full(4, 109.0)] * np.exp(rng.normal(0, 0.003, 8)))
    assert bimodal_gap(two) is not None and bimodal_gap(rng.normal(0, 0.01, 8)) is None
    b, a = _pair(np.array([0.02, 0.03, -0.01, 0.025, 0.04, -0.02]))
    c = families.adjust([compare(b, a)])[0]
    text = more_rounds(c)
    assert text.startswith(("about", "needs >")) and ("(80%" in text or "needs >" in text)
    assert "bimodal" in more_rounds(replace(c, bimodal=0.086))


def test_the_chance_a_cell_is_still_undecided_matches_drawn_rounds() -> None:
    """The weight of each sd drawn (1 / P(undecided at n)) rests on this chance: the
    same test on rounds drawn at that sd gives it, and it rises with the sd."""
    from abbench.stats.decide import _undecided

    lo, hi = math.log1p(-0.01), math.log1p(0.01)
    sigmas = np.array([[0.004], [0.014], [0.042]])
    got = _undecided(sigmas, np.zeros((3, 1)), 3, 2, lo, hi, 0.05, 0.05)[:, 0]
    rng = np.random.default_rng(3)
    for sigma, p in zip(sigmas[:, 0], got, strict=True):
        x = rng.normal(0.0, sigma, (20000, 3))
        m, se = x.mean(axis=1), x.std(axis=1, ddof=1) / math.sqrt(3)
        t = sps.t.ppf(0.95, 2) * se
        decided = (m - hi > t) | (lo - m > t) | ((lo < m - t) & (m + t < hi))
        assert abs(p - (1 - decided.mean())) < 0.02, (sigma, p)
    assert got[0] < got[1] < got[2] and got[0] < 0.5 < got[2]


def test_a_discrete_sampled_metric_whose_rounds_agree_is_decided_by_the_sign_test() -> None:
    """A capacity level (sampled, discrete) 4 against 5 in every round: two rounds decide
    nothing (p 1), six do (p 2^-5); a level equal in every round is not 'changed'."""
    from abbench.stats.paired import compare, sign_p_band

    two = compare({0: 4.0, 1: 4.0}, {0: 5.0, 1: 5.0}, direction="higher", alpha=0.05,
                  noise_band=0.01, kind="sampled")
    six = compare({r: 4.0 for r in range(6)}, {r: 5.0 for r in range(6)}, direction="higher",
                  alpha=0.05, noise_band=0.01, kind="sampled")
    same = compare({r: 4.0 for r in range(6)}, {r: 4.0 for r in range(6)},
                   direction="higher", alpha=0.05, noise_band=0.01, kind="sampled")
    assert two is not None and two.verdict == "inconclusive" and two.p == 1.0
    assert six is not None and six.verdict == "changed" and six.p == 2.0 ** -5 and six.better
    assert same is not None and same.verdict != "changed" and not same.exact
    assert sign_p_band(0.005, 10, 0.00995, -0.01005) == 1.0  # inside the band: no claim


def test_rounds_that_agree_say_when_the_sign_test_decides() -> None:
    """A replay's prompt misses/token, the same in all 4 rounds of each arm (-64.2%, the
    CPU sessions run of docs/examples), said "needs >200 rounds": a t on rounds of sd 0
    has nothing to extrapolate. The sign test decides it once 2^(1 - N) is below the
    level, should the rounds go on agreeing: at 5%, 6 rounds in all; inside the band at
    the cell's alpha."""
    from abbench.report.verdicts import more_rounds

    four = compare({r: 55.0 for r in range(4)}, {r: 19.67 for r in range(4)},
                   direction="lower", kind="sampled")
    inside = compare({r: 0.861 for r in range(4)}, {r: 0.861 for r in range(4)},
                     kind="sampled")
    assert four is not None and four.verdict == "inconclusive" and four.sd_log == 0
    assert four.test.startswith("sign test")
    assert families.rounds_for(four, 0.05) == 6 and families.rounds_for(four, 0.01) == 8
    assert inside is not None and families.rounds_for(inside, 0.001) == 6
    got = families.adjust([four])[0]
    assert got.rounds_needed == 6
    assert more_rounds(got) == "about 2 more rounds (if they go on agreeing)"


def test_rows_not_shown_are_gated_by_the_table_and_the_sd_is_moderated() -> None:
    """The "Also changed" family spends alpha only as far as the table's own cells
    changed; the rounds' sd is pooled where the like cells' sds agree, moderated where
    they differ more than chance."""
    b, a = _pair(np.array([0.02, 0.03, 0.019, 0.025, 0.021, 0.018, 0.04, 0.011]))
    moved = compare(b, a, noise_band=0.001)
    null = compare(*_pair(np.array([0.001, -0.001, 0.0005, -0.0005, 0.0, 0.0002, -0.0002,
                                    0.0001])), noise_band=0.001)
    assert moved is not None and null is not None and moved.verdict == "changed"
    closed = families.adjust([null, moved], ["table", "also"])
    assert closed[1].verdict == "inconclusive" and closed[1].p == 1.0
    assert closed[1].family == "also" and closed[1].rounds_needed is not None
    opened = families.adjust([moved, moved], ["table", "also"])
    assert [c.verdict for c in opened] == ["changed", "changed"]
    alone = families.adjust([moved], ["also"])  # no table family: all of alpha
    assert alone[0].verdict == "changed"
    same = [replace(null, sd_log=s) for s in (0.010, 0.011, 0.009, 0.0105)]
    pool = families.pooled_sd(same)
    assert pool is not None and not pool.prior and pool.df == 4 * 7
    apart = [replace(null, sd_log=s) for s in (0.001, 0.1, 0.002, 0.05, 0.0005, 0.2)]
    pool = families.pooled_sd(apart)
    assert pool is not None and pool.prior and pool.df < 6 * 7
    sd, df = pool.moderate(0.001, 7)
    assert 0.001 < sd < pool.sd and df == pool.df + 7


def test_a_weak_prior_still_moderates_the_rounds() -> None:
    """A prior of the like cells' sd with no more degrees of freedom than the cell's own
    (sds that differ more than chance, few rounds) still moderates the cell's sd: it was
    skipped, and a cell whose three rounds happened to agree promised a verdict in a few
    more rounds from its own sd alone."""
    c = compare(*_pair(np.array([0.0100, 0.0099, 0.0101])))
    assert c is not None and c.verdict == "inconclusive" and c.sd_log is not None
    weak = families.Pool(sd=0.03, df=1, prior=True)
    own = families.rounds_for(c, 0.05)
    moderated = families.rounds_for(c, 0.05, weak)
    assert own is not None and (moderated is None or moderated > own)
    sd, df = weak.moderate(c.sd_log, c.n - 1)
    assert sd > c.sd_log and df == 1 + c.n - 1


def test_a_lone_cell_borrows_the_tables_spread_of_effects() -> None:
    """A cell without like cells (a count, a lone timed row) read its chance estimate as
    the change with a flat prior and promised a verdict: quality counts of 10, 9, 11
    passes of 16 against 7, 8, 9 said "about 91 more rounds"; in simulated null tables
    such cells were never decided there. It takes the table's spread of true effects
    now: none in a table whose like cells spread no more than noise (past 200 rounds),
    its own estimate in one whose cells moved."""
    from abbench.report.verdicts import MANY_ROUNDS
    from abbench.stats.counts import compare_counts

    base = {0: 10.0, 1: 9.0, 2: 11.0}
    arm = {0: 7.0, 1: 8.0, 2: 9.0}
    totals = {r: 16.0 for r in base}
    c = compare_counts(base, arm, base_totals=totals, arm_totals=totals, alpha=0.05)
    assert c is not None and c.verdict == "inconclusive" and c.kind == "counted"

    def cells(*xs: list[float]) -> list[stats.Comparison]:
        got = [compare(*_pair(np.array(x))) for x in xs]
        assert all(g is not None for g in got)
        return [g for g in got if g is not None]

    null = cells([0.01, -0.01, 0.0], [0.0, 0.01, -0.012], [-0.01, 0.0, 0.011])
    moved = cells([0.31, 0.29, 0.30], [-0.2, -0.22, -0.21], [0.5, 0.49, 0.51])
    quiet = families.table_signal([families.pooled_sd(null)])
    loud = families.table_signal([families.pooled_sd(moved)])
    assert quiet == 0.0 and loud is not None and loud > 100
    flat = families.rounds_for(c, 0.005)
    assert flat is not None and flat <= MANY_ROUNDS  # the old promise
    assert (families.rounds_for(c, 0.005, signal=quiet) or 0) > MANY_ROUNDS
    assert families.rounds_for(c, 0.005, signal=loud) == pytest.approx(flat, rel=0.1)
    assert families.table_signal([None, families.pooled_sd(null[:2])]) is None
    # one row that moved among null ones is no spread the table's lone cells share (the
    # quality counts beside a +2% decode row erred short: docs/simulation.md, the ninth
    # pass); the spread the pools show is gated as Pool.spread is
    one = cells([0.05, 0.051, 0.049], [0.0, 0.01, -0.012], [-0.01, 0.0, 0.011],
                [0.012, -0.01, 0.0], [0.0, -0.011, 0.01])
    lone = families.pooled_sd(one)
    assert lone is not None and lone.effects is not None and lone.effects[0] > 0
    assert lone.spread == 0.0 and families.table_signal([lone]) == 0.0


def test_like_cells_show_a_spread_of_effects_only_beyond_chance() -> None:
    """The rounds to decide take true effects to spread around 0 only where like cells'
    estimates spread more than noise would make them at 5%: an estimate taken whenever it
    was over 0 read chance as spread in 37-50% of A/A pools of five cells, and their
    null cells' k then erred long (docs/simulation.md, the seventh pass). Cells whose
    rounds rise and fall together (one server life under every row) count as fewer
    cells; a cell "changed" in the table shows a spread whatever the others' noise."""
    rng = np.random.default_rng(11)

    def pool(shared: float, effects: np.ndarray, n: int = 6) -> families.Pool:
        life = rng.normal(0, 0.01 * math.sqrt(shared), n)
        xs = [effects[i] + life + rng.normal(0, 0.01 * math.sqrt(1 - shared), n)
              for i in range(effects.size)]
        pairs = [_pair(x) for x in xs]
        got = [compare(b, a) for b, a in pairs]
        assert all(g is not None for g in got)
        ratios = [{r: math.log(a[r] / b[r]) for r in b} for b, a in pairs]
        out = families.pooled_sd([g for g in got if g is not None], ratios)
        assert out is not None and out.spread is not None
        return out

    null = np.zeros(5)
    for shared in (0.0, 0.5):
        nulls = [pool(shared, null) for _ in range(400)]
        rate = np.mean([p.beyond_noise(*p.effects, p.cells) for p in nulls if p.effects])
        assert 0.01 <= rate <= 0.10, (shared, rate)  # the test's level
        assert np.mean([(p.spread or 0) > 0 for p in nulls]) <= rate
    moved = pool(0.0, np.array([0.05, -0.04, 0.06, 0.0, -0.05]))
    assert moved.effects is not None
    assert moved.spread == pytest.approx(moved.effects[0] / moved.cells) and moved.spread > 0
    assert moved.worth is not None and 3 < moved.worth <= 5
    # one cell that moved is no spread the others share: the test is made again without
    # the largest cell, and the others alone must show one too (+2% on one decode row
    # of five made the null rows' k err long: docs/simulation.md, the eighth pass)
    lone = [pool(0.0, np.array([0.03, 0.0, 0.0, 0.0, 0.0])) for _ in range(200)]
    assert all(p.effects is not None and p.top is not None for p in lone)
    fired = [p for p in lone if p.effects and p.beyond_noise(*p.effects, p.cells)]
    assert len(fired) > 190 and np.mean([p.spread == 0.0 for p in fired]) > 0.9
    two = pool(0.0, np.array([0.03, -0.03, 0.0, 0.0, 0.0]))
    assert two.effects is not None and two.spread == pytest.approx(two.effects[0] / 5)
    # at 2 rounds the pool knows one cell's noise: no test shows a spread there. Where a
    # like cell changed, the effects spread, and how far the others' do is what they show
    # beyond their noise, not the change (adjust hands them to Pool.beside)
    pairs = [_pair(np.array(x)) for x in ([0.10, 0.104], [-0.10, -0.18], [0.01, -0.012],
                                          [-0.005, 0.008])]
    got = [compare(b, a) for b, a in pairs]
    assert all(g is not None for g in got)
    cells = [g for g in got if g is not None]
    assert cells[0].verdict == "changed" and cells[1].verdict != "changed"
    two = families.pooled_sd(cells, [{r: math.log(a[r] / b[r]) for r in b} for b, a in pairs])
    assert two is not None and two.effects is not None
    assert two.moved is None and two.noise_df == 1 and two.spread == 0.0
    var = two.sd ** 2
    far = two.beside(cells[1:])  # the -14% beside three null-looking cells
    assert far.spread == pytest.approx(sum(math.log1p(c.change or 0) ** 2 - var / c.n
                                           for c in cells[1:]) / 3)
    assert (far.spread or 0) > 0
    assert two.beside(cells[2:]).spread == 0.0  # the others show nothing beyond noise
    # in a table, the others' rounds do not depend on how far the changed cell moved
    seen = []
    for big in (0.3, 0.6):
        pairs = [_pair(np.array(x)) for x in ([big, big + 0.01, big + 0.005],
                                              [-0.10, -0.18, -0.14], [0.01, -0.012, 0.004],
                                              [-0.005, 0.008, 0.0])]
        table = [g for b, a in pairs if (g := compare(b, a)) is not None]
        pools = {("table", "decode"): families.pooled_sd(
            table, [{r: math.log(a[r] / b[r]) for r in b} for b, a in pairs])}
        out = families.adjust(table, metrics=["decode"] * 4, pools=pools)
        assert out[0].verdict == "changed"
        assert all(c.verdict == "inconclusive" and c.rounds_needed for c in out[1:])
        seen.append([c.rounds_needed for c in out[1:]])
    assert seen[0] == seen[1]


def test_the_pools_degrees_of_freedom_count_what_the_rounds_share() -> None:
    """Cells that move together over the rounds (one server life under every row) know
    no more of the noise than one of them; independent ones know their sum; two rounds
    never tell them apart, so they count as one cell."""
    rng = np.random.default_rng(5)
    rounds = range(12)
    life = rng.normal(0, 0.02, 12)
    together = [{r: float(life[r] + e) for r, e in zip(rounds, rng.normal(0, 1e-4, 12),
                                                         strict=True)} for _ in range(6)]
    apart = [{r: float(e) for r, e in zip(rounds, rng.normal(0, 0.02, 12), strict=True)}
             for _ in range(6)]
    eff_together = families.effective_df(together)
    eff_apart = families.effective_df(apart)
    assert eff_together is not None and eff_together < 11 * 1.1
    assert eff_apart is not None and eff_apart > 11 * 6 * 0.6
    two = [{0: float(x), 1: float(y)} for x, y in rng.normal(0, 0.02, (6, 2))]
    assert families.effective_df(two) == pytest.approx(1.0)
    # the pool's prior counts no more than that, beyond the cell's own rounds
    pool = families.Pool(sd=0.02, df=60, prior=True, effective=eff_together)
    _sd, df = pool.moderate(0.01, 11)
    assert df <= max(11, eff_together) + 1e-9
    homogeneous = families.Pool(sd=0.02, df=66, effective=eff_apart)
    assert homogeneous.moderate(0.01, 11) == (0.02, pytest.approx(eff_apart))


def test_the_pools_count_is_near_the_truth_from_few_rounds() -> None:
    """Five cells that share half their noise are worth 2.5 cells (Satterthwaite); r^2
    over a few rounds overstates nothing of that once the pairs' mean is taken back
    through its expectation: the median count from 4 and 6 rounds is within 20% of the
    truth, where r^2 adjusted pair by pair read 3.5 and 3.1 cells. E r^2 is exact."""
    rng = np.random.default_rng(11)
    draws = rng.normal(size=(20000, 2, 4))
    r = np.array([np.corrcoef(d[0], d[0] * 0.5 + d[1] * math.sqrt(0.75))[0, 1] for d in draws])
    assert float(families._mean_r2(0.25, np.array([3.0]))[0]) == pytest.approx(
        float((r**2).mean()), abs=0.01)
    for n in (4, 6):
        worth = []
        for _ in range(600):
            x = rng.normal(size=n) * math.sqrt(0.5) + rng.normal(size=(5, n)) * math.sqrt(0.5)
            eff = families.effective_df([dict(enumerate(row.tolist())) for row in x])
            assert eff is not None
            worth.append(eff / (n - 1))
        assert 2.5 * 0.9 < float(np.median(worth)) < 2.5 * 1.2


def test_a_cell_is_tested_with_the_sd_its_like_cells_share() -> None:
    """Through the table's one door: at 12 rounds a cell whose own sd is a chance low is
    tested with the sd its five like cells share (its interval widens, the statistics
    name it); at 2 rounds, or with two like cells, the cell keeps its own."""
    from abbench.stats.cells import CellInput, compare_cells

    rng = np.random.default_rng(11)

    def cells(n: int, k: int) -> list[CellInput]:
        out = []
        for j in range(k):
            d = rng.normal(0.0, 0.03, n) * (0.2 if j == 0 else 1.0)
            base = {r: 100.0 for r in range(n)}
            arm = {r: float(100.0 * math.exp(d[r])) for r in range(n)}
            out.append(CellInput("decode_tok_s", base, arm, direction="higher", alpha=0.05,
                                 noise_band=0.01, base_name="a", arm_name="b"))
        return out

    got = compare_cells(cells(12, 6))
    quiet = got[0]
    assert quiet is not None and quiet.moderated is not None and quiet.sd_log is not None
    sd, df = quiet.moderated
    assert sd > 1.2 * quiet.sd_log and 11 < df <= 66
    assert "moderated by like cells" in quiet.test
    assert all(c is not None and c.moderated is None for c in compare_cells(cells(2, 6)))
    assert all(c is not None and c.moderated is None for c in compare_cells(cells(12, 2)))


def test_server_lives_on_two_levels_seen_across_the_table() -> None:
    """Three arms at 3 rounds, three decode rows sharing each server life. Lives on two
    levels 9% apart, the baseline's three on the low one and the PR's three on the high
    one: a change in every round, which the other arm, with lives on both levels, shows
    to be the machine's. Tested with the two-level sd the PR's cells are not "changed";
    where the other arm's lives all sit low too (nothing shows two levels of one
    build), or the change is -45%, they are."""
    from abbench.stats.cells import CellInput, compare_cells, table_lives
    from abbench.stats.decide import lives_gap

    rng = np.random.default_rng(5)
    gap = math.log(1.09)

    def table(levels: dict[str, list[int]], effect: float = 0.0) -> list[CellInput]:
        out = []
        for level in (300.0, 250.0, 200.0):
            vals = {arm: {r: level * math.exp(gap * lv + (effect if arm == "pr" else 0.0)
                                              + rng.normal(0, 0.004))
                          for r, lv in enumerate(lvs)} for arm, lvs in levels.items()}
            out += [CellInput("decode_tok_s", vals["base"], vals[arm], direction="higher",
                              alpha=0.05, noise_band=0.01, base_name="base", arm_name=arm)
                    for arm in ("pr", "other")]
        return out

    machine = {"base": [0, 0, 0], "pr": [1, 1, 1], "other": [1, 0, 0]}
    cells = table(machine)
    seen = lives_gap(table_lives(cells))
    assert seen is not None and abs(seen - gap) < 0.01
    got = compare_cells(cells)
    pr = [c for c, ci in zip(got, cells, strict=True) if ci.arm_name == "pr"]
    assert all(c is not None and c.verdict != "changed" and c.bimodal is not None
               and "two levels" in c.test and c.moderated is None for c in pr), pr
    assert pr[0] is not None and "bimodal noise" in more_rounds(pr[0])
    # without the other arm's evidence the same rounds are a change (no test can tell)
    change = table({"base": [0, 0, 0], "pr": [1, 1, 1], "other": [0, 0, 0]})
    assert lives_gap(table_lives(change)) is None
    got = compare_cells(change)
    assert all(c is not None and c.verdict == "changed" for c, ci in zip(got, change, strict=True)
               if ci.arm_name == "pr")
    # a change far beyond the lives' gap is decided on a two-level machine
    big = table(machine, effect=math.log(0.55))
    got = compare_cells(big)
    assert all(c is not None and c.verdict == "changed" and not c.better
               for c, ci in zip(got, big, strict=True) if ci.arm_name == "pr")
    # one arm against the baseline at 3 rounds: six lives are too few to read
    assert lives_gap({("base", r): 0.0 for r in range(3)}
                     | {("pr", r): gap * (r == 0) for r in range(3)}) is None
    # normal noise on the lives shows no two levels
    assert lives_gap({(a, r): float(rng.normal(0, 0.01)) for a in ("base", "pr", "other")
                      for r in range(3)}) is None
    # through a run's records: the legend says so
    levels = {"base": [0, 0, 0], "pr": [1, 1, 1], "same": [1, 0, 0]}
    recs = [{"type": "sample", "valid": True, "arm": arm, "round": r, "rep": 0,
             "workload": w, "metrics": {
                 "decode_tok_s": size * math.exp(gap * lvs[r] + rng.normal(0, 0.004))}}
            for r in range(3) for arm, lvs in levels.items()
            for w, size in (("decode 32K", 60.0), ("decode 64K", 50.0), ("decode 128K", 40.0))]
    run = table_of(parse_records(lives(recs)), META, metrics=["decode_tok_s"])
    legend = "\n".join(legend_lines(run))
    assert "with at least the sd of server lives on two levels" in legend
    assert not any(c.comparison.verdict == "changed" for row in run.rows
                   for a, c in row.cells.items() if a != "base" and c.comparison)
