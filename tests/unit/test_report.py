"""Report formatting, pinned by golden files (UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from abbench.model.metrics import spec
from abbench.model.records import parse_records
from abbench.report.formats import render_json
from abbench.report.markdown import header_text, note_text, render_markdown
from abbench.report.table import table_of
from abbench.report.text import fmt_values, md_escape
from tests.recordkit import lives

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def records(values: dict[str, list[list[float]]], workload: str = "decode 32K"):
    """Sample records: arm -> per round -> reps."""
    out = []
    for arm, rounds in values.items():
        for r, reps in enumerate(rounds):
            for k, v in enumerate(reps):
                out.append({"type": "sample", "arm": arm, "round": r, "rep": k,
                            "workload": workload, "valid": True,
                            "metrics": {"decode_tok_s": v, "server_decode_tok_s": v * 1.001}})
    return out


META = {"id": "20261129-120000-abcd", "arms": [{"name": "prod", "label": "prod ecb52158"},
                                               {"name": "pr", "label": "this PR"}],
        "baseline": "prod", "rounds": 3, "reps": 2, "order": "interleaved", "seed": 7,
        "environment": {"host": "box", "cpu": "Test CPU"},
        "timing": {"wall_s": 100.0, "overhead_s": 0.5, "ready_lag_ms_max": 12.0}}


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_golden_markdown():
    recs = records({"prod": [[51.1, 51.2], [51.5, 51.5], [51.3, 51.4]],
                    "pr": [[52.6, 52.7], [52.9, 53.0], [52.8, 52.8]]})
    recs += records({"prod": [[53.4], [53.7]], "pr": [[52.4], [55.3]]}, workload="decode 1K")
    recs.append({"type": "sample", "arm": "pr", "round": 0, "rep": 2, "workload": "decode 32K",
                 "valid": False, "reason": "completion_tokens 3 != 4", "metrics": {}})
    recs.append({"type": "slot", "arm": "pr", "round": 3, "status": "failed",
                 "reason": "the server exited with code 1 | before ready"})
    table = table_of(parse_records(lives(recs)), META)
    check_golden("report_basic.md", render_markdown(table))
    data = json.loads(render_json(table))
    # every row is in report.json: the two shown, and the server timings beside them
    assert data["baseline"] == "prod" and len([r for r in data["rows"] if r["shown"]]) == 2
    assert len(data["rows"]) == 4
    assert data["rows"][0]["cells"]["prod"]["values"] == pytest.approx([51.15, 51.5, 51.35])


def test_cells_show_rounds_or_range():
    sp = spec("decode_tok_s")
    assert fmt_values(sp, [51.86, 51.98]) == "51.86 / 51.98"
    assert fmt_values(sp, [51.5, 51.15, 51.3, 51.2]) == "51.15-51.50"


def test_markdown_escaping():
    assert md_escape("a|b\n<script>") == "a\\|b &lt;script&gt;"


def test_baseline_override_moves_the_column():
    recs = records({"prod": [[10.0], [10.0]], "pr": [[11.0], [11.0]]})
    table = table_of(parse_records(lives(recs)), META, baseline="pr")
    assert table.arms == ["pr", "prod"]
    assert "(-9.1%, exact) ▼" in render_markdown(table)  # every round the same: exact




def test_header_names_each_git_arms_commit_and_patch_set():
    meta = {**META, "arms": [
        {"name": "prod", "label": "prod", "git": {"source": "llama.cpp", "ref": "base",
                                                 "sha": "c4436572" + "0" * 32, "patch": []}},
        {"name": "pr", "label": "this PR", "git": {
            "source": "llama.cpp", "ref": "slow", "sha": "b6ed0fc9" + "1" * 32,
            "patch": [["revert", "ea7f3bf3" + "2" * 32]]}}]}
    recs = records({"prod": [[10.0], [10.0]], "pr": [[11.0], [11.0]]})
    header = header_text(table_of(parse_records(lives(recs)), meta))
    assert header.splitlines()[1] == ("Builds: prod = llama.cpp c4436572 (base); pr = llama.cpp "
                                      "b6ed0fc9 (slow), reverting ea7f3bf3.")
    # no git arms: one line
    assert len(header_text(table_of(parse_records(lives(recs)), META)).splitlines()) == 1


def test_a_leave_one_out_arm_says_which_rows_move_back():
    sha = "b6ed0fc9" + "1" * 32
    meta = {**META, "arms": [
        {"name": "prod", "label": "prod", "git": {"source": "s", "sha": "c" * 40, "patch": []}},
        {"name": "pr", "label": "this PR", "git": {"source": "s", "sha": sha, "patch": []}},
        {"name": "pr-no-x", "label": "pr without x",
         "git": {"source": "s", "sha": sha, "patch": [["revert", "ea7f3bf3" + "2" * 32]]}}]}
    recs = records({"prod": [[10.0], [10.0], [10.0]], "pr": [[12.0], [12.1], [12.05]],
                    "pr-no-x": [[10.0], [10.01], [10.0]]})
    notes = [note_text(n) for n in table_of(parse_records(lives(recs)), meta).notes]
    assert "Without ea7f3bf3 (pr without x): back at the baseline: decode 32K (tok/s)." in notes
