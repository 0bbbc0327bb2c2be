"""``cpus:`` and ``nice:`` in the arms file: parsing, messages, what is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from abbench.config.arms import resolve_arms
from abbench.config.loader import config_from_data
from abbench.config.storage import config_for_storage
from abbench.config.values import format_cpus, parse_cpus
from abbench.errors import ConfigError


@pytest.mark.parametrize(("given", "ids"), [
    ("0-7", list(range(8))), ("0-3,8-11", [0, 1, 2, 3, 8, 9, 10, 11]), ("5", [5]),
    (" 2, 0 ", [0, 2]), ([3, 1, 1], [1, 3]), (4, [4]), ("0-0", [0]),
])
def test_parse_cpus(given: object, ids: list[int]) -> None:
    assert parse_cpus(given) == ids


@pytest.mark.parametrize("bad", ["", "7-3", "a-b", "0-", "1,,2", [-1], [1.5], True, [],
                                 {"a": 1}])
def test_parse_cpus_refuses(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_cpus(bad)


@pytest.mark.parametrize(("ids", "text"), [
    ([0, 1, 2, 3, 8], "0-3,8"), ([5], "5"), ([0, 2, 4], "0,2,4"), ([9, 10, 1], "1,9-10"),
])
def test_format_cpus_is_the_kernel_list_format(ids: list[int], text: str) -> None:
    assert format_cpus(ids) == text
    assert parse_cpus(text) == sorted(ids)


def _cfg(tmp_path: Path, **arm: object) -> dict[str, object]:
    return {"defaults": {"start": ["srv", "--port", "{port}"]},
            "arms": [{"name": "a", **arm}, {"name": "b"}],
            "workloads": [{"contexts": [64]}]}


def test_arm_and_defaults_fields(tmp_path: Path) -> None:
    data = _cfg(tmp_path, cpus="0-1", nice=5)
    data["defaults"] = {**data["defaults"], "nice": 1}  # type: ignore[dict-item]
    cfg = config_from_data(data, source="arms.yaml")
    a, b = resolve_arms(cfg)
    assert (a.cpus, a.nice, b.cpus, b.nice) == ([0, 1], 5, None, 1)
    stored = config_for_storage(cfg)
    assert stored["resolved_arms"][0]["cpus"] == [0, 1]
    assert "cpus" not in stored["resolved_arms"][1]  # unset: not stored (the digest stays)


def test_stored_config_without_them_is_unchanged(tmp_path: Path) -> None:
    stored = config_for_storage(config_from_data(_cfg(tmp_path), source="arms.yaml"))
    for arm in stored["resolved_arms"]:
        assert "cpus" not in arm and "nice" not in arm


@pytest.mark.parametrize(("arm", "says"), [
    ({"cpus": "3-1"}, "arms[0].cpus: '3-1' is not a CPU list"),
    ({"cpus": [0, -2]}, "arms[0].cpus: -2 is not a CPU id"),
    ({"nice": 20}, "arms[0].nice: Input should be less than or equal to 19"),
    ({"nice": "low"}, "arms[0].nice"),
])
def test_bad_values_name_the_field(tmp_path: Path, arm: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as e:
        config_from_data(_cfg(tmp_path, **arm), source="arms.yaml")
    assert says in str(e.value)
