"""The capacity search's bracketing, config and Pareto front, without a server."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from abbench.config.capacity import CapacitySpec
from abbench.report.pareto_plot import pareto_front
from abbench.workload.capacity_search import bracket


@pytest.mark.parametrize("knee", [1, 2, 3, 4, 5, 7, 8, 11, 12])
def test_bracket_finds_every_knee_at_resolution_one(knee: int) -> None:
    b = bracket(1, 12, 1, lambda c: c <= knee, whole=True, max_levels=16)
    assert b.good == knee and b.resolved
    assert b.bad == (None if knee == 12 else knee + 1)  # the top met: no failing level
    assert len(b.tried) <= 8


def test_bracket_below_the_range_and_at_a_coarse_resolution() -> None:
    assert bracket(2, 64, 1, lambda c: False, whole=True, max_levels=16).good is None
    b = bracket(1, 64, 4, lambda c: c <= 21, whole=True, max_levels=16)
    assert b.good is not None and b.bad is not None
    assert b.good <= 21 < b.bad and b.bad - b.good <= 4
    r = bracket(0.5, 20, 0.25, lambda x: x <= 3.3, whole=False, max_levels=16)
    assert r.good is not None and r.bad is not None and r.good <= 3.3 < r.bad
    assert r.bad - r.good <= 0.25


def test_bracket_stops_at_max_levels_and_says_so() -> None:
    b = bracket(1, 1000, 1, lambda c: c <= 700, whole=True, max_levels=4)
    assert not b.resolved and len(b.tried) == 4


def test_capacity_config_errors_say_what_to_write() -> None:
    with pytest.raises(ValidationError, match="exactly one of concurrency"):
        CapacitySpec.model_validate({"ttft_p99_ms": 100})
    with pytest.raises(ValidationError, match="at least one bound"):
        CapacitySpec.model_validate({"concurrency": [1, 8]})
    with pytest.raises(ValidationError, match="low must be below high"):
        CapacitySpec.model_validate({"concurrency": [8, 8], "e2e_p99_ms": 100})
    spec = CapacitySpec.model_validate({"rate": [0.5, 8], "ttft_p99_ms": 100,
                                        "resolution": 0.25})
    assert spec.by_rate and spec.bounds() == {"load_ttft_p99_ms": 100}


def test_pareto_front_keeps_the_points_nothing_beats() -> None:
    pts = [(10.0, 50.0, True, "c=1"), (18.0, 45.0, True, "c=2"), (17.0, 40.0, True, "c=3"),
           (30.0, 20.0, False, "c=8")]
    assert [p[3] for p in pareto_front(pts)] == ["c=1", "c=2", "c=8"]
