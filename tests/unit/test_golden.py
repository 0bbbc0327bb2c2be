"""Every renderer pinned by a golden file, on real H200 runs (tests/golden/runs/, copied
from shared/fixtures) and a fixed arms file. ``UPDATE_GOLDEN=1`` rewrites them."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abbench.cli import app
from abbench.report.compare import run_table
from abbench.report.markdown import note_text, render_markdown
from abbench.report.noise_floor import noise_floor, render_calibration
from abbench.report.quality_text import render_section
from abbench.report.tablemodel import Note
from abbench.store.run import Run
from tests.conftest import copy_golden_runs

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
RUNS = GOLDEN / "runs"
ROOT = Path(__file__).resolve().parents[2]


#: a number in full precision (JSON, CSV): its last digits follow the numpy/scipy build
FULL_FLOAT = re.compile(r"-?\d+\.\d{9,}(?:e[-+]?\d+)?")


def same_numbers(text: str, golden: str) -> bool:
    """``text`` equals ``golden`` but for the last bits of full-precision floats: the
    same words and short numbers, and each long float within 1e-9 of the golden's. A
    t quantile or a mean from another numpy or scipy build differs in its 15th digit;
    what a reader sees (every markdown table, every rounded figure) is compared whole."""
    words, gold_words = FULL_FLOAT.split(text), FULL_FLOAT.split(golden)
    nums, gold_nums = FULL_FLOAT.findall(text), FULL_FLOAT.findall(golden)
    return words == gold_words and len(nums) == len(gold_nums) and all(
        math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
        for a, b in zip(nums, gold_nums, strict=True))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    golden = path.read_text()
    if name.endswith((".json", ".csv", ".bencher")):
        assert same_numbers(text, golden), f"{name} changed: UPDATE_GOLDEN=1 rewrites it"
    else:
        assert text == golden, f"{name} changed: UPDATE_GOLDEN=1 rewrites it"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_golden_runs(tmp_path_factory.mktemp("results"))


def cli(*args: str | Path) -> str:
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code in (0, 1), (res.exit_code, res.stdout, res.stderr)
    return res.stdout


@pytest.mark.parametrize("fmt", ["md", "json", "csv", "bencher", "github"])
def test_report_formats(results: Path, fmt: str) -> None:
    check_golden(f"report-h200-seed.{fmt}", cli("report", results / "h200-seed", "--results",
                                                results, "--format", fmt))


def test_report_of_an_aa_run(results: Path) -> None:
    check_golden("report-h200-aa.md", cli("report", results / "h200-aa-32k", "--results",
                                          results))


def test_quality_section(results: Path) -> None:
    table = run_table(Run(results / "h200-seed"))
    check_golden("quality-section.md", "\n".join(render_section(table)) + "\n")


def test_compare(results: Path) -> None:
    check_golden("compare.md", cli("compare", f"{results / 'h200-seed'}:base",
                                   f"{results / 'h200-aa-32k'}:fa-on", "--results", results))


def test_ls(results: Path) -> None:
    check_golden("ls.txt", cli("ls", "--results", results))


def test_history_check(results: Path) -> None:
    check_golden("history-check.txt", cli("history", "--results", results, "--check"))


def test_history_series(results: Path) -> None:
    check_golden("history-series.txt", cli("history", "--results", results))


def test_otava_export(results: Path, tmp_path: Path) -> None:
    """One series' CSV pinned, and every CSV read back by the layout otava.yaml names."""
    import csv

    import yaml

    cli("history", "--results", results, "--otava", tmp_path)
    conf = yaml.safe_load((tmp_path / "otava.yaml").read_text())
    for name, test in conf["tests"].items():
        assert test["type"] == "csv" and Path(test["file"]) == tmp_path / f"{name}.csv"
        with open(test["file"], newline="") as f:
            rows = list(csv.DictReader(f))
        assert rows and {test["time_column"], *test["attributes"], *test["metrics"]} \
            <= set(rows[0])
        assert all(float(r["lower"]) <= float(r["value"]) <= float(r["upper"]) for r in rows)
    check_golden("otava-base-decode.csv",
                 (tmp_path / "base-decode-tok-s-decode-32k-128t-smollm2-135m-instruct-q4-1-gguf.csv"
                  ).read_text())


def test_calibrate_table(results: Path) -> None:
    table = run_table(Run(results / "h200-aa-32k"))
    floors = noise_floor(table, effect=0.02)
    check_golden("calibrate.md", render_calibration(floors, arm="fa-on", effect=0.02))


def test_validate_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("LLAMA_SERVER", "llama-server-golden")
    monkeypatch.setenv("SMOLLM2_GGUF", "model.gguf")
    check_golden("validate-plan.txt", cli("validate", "arms/llama-cpu.yaml", "--seed", "7"))


#: every stored run, those of the noise labs' folders too
EXAMPLES = sorted(p.parent for p in (ROOT / "docs" / "examples").rglob("report.md")
                  if (p.parent / "samples.jsonl").exists())


@pytest.mark.parametrize("run", EXAMPLES,
                         ids=lambda p: str(p.relative_to(ROOT / "docs" / "examples")))
def test_every_stored_example_re_renders_byte_identical(run: Path) -> None:
    """A stored run's report.md is what its samples give today, byte for byte."""
    table = run_table(Run(run))
    assert render_markdown(table) == (run / "report.md").read_text()


def test_report_json_carries_the_header_and_notes_whole(results: Path) -> None:
    """report.json holds the header, footer and notes as data, and each of them words
    exactly as the markdown report says it."""
    md = cli("report", results / "h200-seed", "--results", results)
    data = json.loads(cli("report", results / "h200-seed", "--results", results,
                          "--format", "json"))
    kinds = [n["kind"] for n in data["notes"]]
    assert kinds.count("drift_between_arms") + kinds.count("drift_across_run") >= 1
    for part in ("header", "footer", "notes"):
        for n in data[part]:
            text = note_text(Note(**n))
            assert text in md, (part, n["kind"], text)
