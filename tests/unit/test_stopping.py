"""The --until-ci stopping rule: alpha split across the looks, the 95% width it holds to
its target, and the report's alpha kept in run.json."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from abbench.config.stats import StatsConfig
from abbench.model.records import parse_records
from abbench.report.table import table_of
from abbench.stats.paired import compare
from abbench.stats.stopping import EARLY, half_width_95, look_alphas, stop_reason
from tests.recordkit import lives


def test_the_looks_and_the_report_share_alpha() -> None:
    s = StatsConfig(alpha=0.05)
    early, end = look_alphas(s, 6)
    assert early == pytest.approx(EARLY * 0.05 / 5) and end == pytest.approx(0.8 * 0.05)
    assert 5 * early + end == pytest.approx(0.05)  # Bonferroni: never more than alpha
    assert look_alphas(s, 1) == (0.05, 0.05)


def test_the_width_stop_uses_the_95_interval() -> None:
    base = {r: 100.0 * (1 + 0.004 * (-1) ** r) for r in range(8)}
    arm = {r: 102.0 for r in range(8)}
    c = compare(base, arm)
    assert c is not None and c.sd_log is not None
    want = sps.t.ppf(0.975, 7) * c.sd_log / math.sqrt(8)
    assert half_width_95(c) == pytest.approx(want)
    assert half_width_95(c) > c.half_width  # the shown interval is the 90% one
    got = stop_reason([c], [], target=math.expm1(want) * 1.001, rounds_done=8, cap=24)
    assert got is not None and "95% interval" in got
    assert stop_reason([c], [], target=math.expm1(c.half_width) * 1.001, rounds_done=8,
                       cap=24) is None  # narrow at 90%, not yet at 95%


def test_an_until_ci_run_is_reported_at_the_report_alpha() -> None:
    recs = [{"type": "sample", "valid": True, "arm": arm, "round": r, "workload": "w",
             "metrics": {"decode_tok_s": v}}
            for r in range(4) for arm, v in (("a", 100.0 + r % 2), ("b", 103.0 + r % 2 * 0.5))]
    meta = {"id": "x", "arms": [{"name": "a"}, {"name": "b"}], "order": "interleaved",
            "stats": {"alpha": 0.05}}
    plain = table_of(parse_records(lives(recs)), meta).rows[0].cells["b"].comparison
    meta["until_ci"] = {"target": 0.01, "max_rounds": 12, "alpha_report": 0.04, "looks": []}
    seq = table_of(parse_records(lives(recs)), meta).rows[0].cells["b"].comparison
    assert plain is not None and seq is not None
    assert plain.alpha == 0.05 and seq.alpha == 0.04
    assert seq.hi - seq.lo > plain.hi - plain.lo  # a 92% interval, wider than 90%
