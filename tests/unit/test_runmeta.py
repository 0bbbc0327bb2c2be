"""run.json typed: every stored run loads as it is (unknown keys kept, the data given
back equal), and a field of the wrong type is a clean error naming the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abbench.cli import app
from abbench.model.runmeta import Look, UntilCiState, parse_meta
from abbench.store.run import Run

ROOT = Path(__file__).resolve().parents[2]
STORED = sorted([*ROOT.glob("docs/examples/*/run.json"),
                 *ROOT.glob("tests/golden/runs/*/run.json")])


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.parent.name)
def test_every_stored_run_json_loads_and_gives_its_data_back(path: Path) -> None:
    data = json.loads(path.read_text())
    meta = parse_meta(data)
    assert meta.data() == data
    assert meta.arm_names == [a["name"] for a in data["arms"]]


def test_unknown_keys_are_kept() -> None:
    meta = parse_meta({"id": "x", "arms": [{"name": "a", "mine": 1}], "future": [1, 2]})
    assert meta.data() == {"id": "x", "arms": [{"name": "a", "mine": 1}], "future": [1, 2]}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    dst = tmp_path / "results" / "h200-seed"
    shutil.copytree(ROOT / "tests" / "golden" / "runs" / "h200-seed", dst)
    return dst


@pytest.mark.parametrize(("field", "value", "named"), [
    ("arms", [{"name": 3}], "arms.0.name"),
    ("rounds", "many", "rounds"),
    ("schedule", [[0, "first", "base"]], "schedule.0.1"),
    ("until_ci", {"target": "2%", "max_rounds": 8}, "until_ci.target"),
])
def test_a_field_of_the_wrong_type_is_a_clean_error(run_dir: Path, field: str, value: object,
                                                    named: str) -> None:
    path = run_dir / "run.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    res = CliRunner().invoke(app, ["report", str(run_dir), "--results", str(run_dir.parent)])
    assert res.exit_code == 2, res.output
    assert named in res.stderr and "run.json has a field of the wrong type" in res.stderr
    assert "Traceback" not in res.output + res.stderr


def test_until_ci_state_is_written_through_its_typed_method(run_dir: Path) -> None:
    run = Run(run_dir)
    state = UntilCiState(target=0.02, max_rounds=8, alpha_per_look=0.025, alpha_report=0.04,
                         looks=[Look(rounds=4, max_half_width=0.03)], stopped=None)
    run.set_until_ci(state, schedule=[(0, 0, "base"), (0, 1, "pr")])
    info = run.info()
    assert info.until_ci == state and info.schedule == [(0, 0, "base"), (0, 1, "pr")]
    assert run.meta()["until_ci"]["looks"] == [{"rounds": 4, "max_half_width": 0.03}]
