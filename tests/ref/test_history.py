"""Stored runs over time: ls, report, compare, history (plots, --check), the index,
load_samples, and bad input. Real runs against the reference server, and
series of stored runs written with abbench's own store code."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abbench.cli import app
from abbench.history.plot import plot_history
from abbench.history.series import SAMPLE_COLUMNS, build_series
from abbench.report.compare import run_table
from abbench.store.index import INDEX_FILE, open_index
from abbench.store.run import Run, list_runs
from tests.conftest import refserver_start, write_arms


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


# ---------------------------------------------------------------- real runs (refserver)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Two real abbench runs against the reference server: 200 against 220 tok/s."""
    tmp = tmp_path_factory.mktemp("hist")
    results = tmp / "results"

    def arm(name: str, label: str, rate: str, commit: str) -> str:
        return (f"  - name: {name}\n    label: {label}\n    commit: {commit}\n"
                f"    start: {json.dumps(refserver_start('--rate', rate))}\n")

    arms = write_arms(tmp / "arms.yaml", "rounds: 2\nwarmup: 0\n"
                      "defaults: {preset: llama.cpp, ready: {timeout: 30}}\narms:\n"
                      + arm("a", "prod", "200", "ecb52158") + arm("b", "pr", "220", "1a2b3c4d")
                      + "workloads:\n  - contexts: [64]\n    decode_tokens: 24\n")
    for _ in range(2):
        code, _out, err = cli("run", arms, "--results", results, "--plain")
        assert code == 0, err
    return results, [r.id for r in list_runs(results)]


def test_ls_lists_both_runs(two_runs: tuple[Path, list[str]]) -> None:
    results, ids = two_runs
    code, out, _ = cli("ls", "--results", results)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("RUN")
    for run_id, line in zip(ids, lines[1:], strict=True):
        assert line.startswith(run_id)
        assert "2/2" in line and "complete" in line
        assert "prod @ecb52158 (base)" in line and "pr @1a2b3c4d" in line
    assert (results / INDEX_FILE).is_file()
    assert cli("ls", "--results", results, "--label", "nothing-like-this")[1] == "no runs\n"
    assert len(cli("ls", "--results", results, "--label", "PROD")[1].splitlines()) == 3
    today = dt.date.today().isoformat()
    assert len(cli("ls", "--results", results, "--since", today)[1].splitlines()) == 3
    assert cli("ls", "--results", results, "--until", "2000-01-01")[1] == "no runs\n"


def test_report_rerenders_from_samples(two_runs: tuple[Path, list[str]]) -> None:
    results, ids = two_runs
    code, md, _ = cli("report", ids[0], "--results", results)
    assert code == 0
    row = next(line for line in md.splitlines() if line.startswith("| decode 64"))
    assert "| prod | pr |" in md
    assert "(+" in row  # pr is faster: 220 against 200 tok/s
    # by folder, as JSON, with the other arm as baseline
    code, js, _ = cli("report", str(results / ids[1]), "--format", "json", "--baseline", "b")
    data = json.loads(js)
    assert code == 0 and data["baseline"] == "b"
    cells = data["rows"][0]["cells"]
    assert 190 < cells["a"]["mean"] < 205 and 205 < cells["b"]["mean"] < 226
    code, text, _ = cli("report", ids[1], "--results", results, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert code == 0 and {r["arm"] for r in rows if r["metric"] == "decode_tok_s"} == {"a", "b"}
    cand = next(r for r in rows if r["metric"] == "decode_tok_s" and r["arm"] == "b")
    # the comparison's fields are those of abbench.stats.Comparison (a percent or a fraction)
    change = float(cand["cmp_delta_pct"]) / 100 if "cmp_delta_pct" in cand \
        else float(cand["cmp_change"])
    assert 0.05 < change < 0.15
    assert cli("report", ids[0], "--results", results, "--baseline", "zz")[0] == 2


def test_compare_across_runs(two_runs: tuple[Path, list[str]]) -> None:
    results, ids = two_runs
    code, out, _ = cli("compare", f"{ids[0]}:a", f"{ids[1]}:b", "--results", results)
    assert code == 0
    assert f"prod ({ids[0]})" in out and f"pr ({ids[1]})" in out
    assert "2 pairs" in out and "not interleaved" in out
    row = next(line for line in out.splitlines() if line.startswith("| decode 64"))
    delta = float(re.search(r"\(([+-]\d+\.\d+)%", row).group(1))  # type: ignore[union-attr]
    assert 5 < delta < 15
    code, out, err = cli("compare", ids[0], ids[1], "--results", results, "--format", "json")
    assert code == 0 and "not interleaved" in err
    assert json.loads(out)["arms"][0]["name"] == f"{ids[0]}:a"
    code, _, err = cli("compare", f"{ids[0]}:nope", ids[1], "--results", results)
    assert code == 2 and "no arm 'nope'" in err and "arms: a, b" in err


def test_history_plot_shows_both_runs(two_runs: tuple[Path, list[str]], tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    results, _ = two_runs
    png = tmp_path / "h.png"
    code, _, err = cli("history", "--results", results, "--metric", "decode_tok_s",
                       "--workload", "decode 64", "--out", png)
    assert code == 0, err
    img = mpimg.imread(png)
    assert img.ndim == 3 and img.shape[0] >= 300 and img.shape[1] >= 800
    with open_index(results) as ix:
        series = build_series(ix, ["decode_tok_s"], ["decode 64"])
    summary = plot_history(series, tmp_path / "h.svg", x="commit")
    assert summary.panels[0].points == {"prod (a) [reference]": 2, "pr (b) [reference]": 2}
    assert (tmp_path / "h.svg").read_text().lstrip().startswith("<?xml")
    code, out, _ = cli("history", "--results", results)
    assert code == 0 and "prod (a): decode 64 (tok/s) [reference]: 2 run(s)" in out


def test_history_html_page(two_runs: tuple[Path, list[str]], tmp_path: Path) -> None:
    results, ids = two_runs
    code, _, err = cli("history", "--results", results, "--html", tmp_path / "site")
    assert code == 0, err
    site = tmp_path / "site"
    page = (site / "index.html").read_text()
    assert f"{ids[1]}</a></h2>" in page and "<td>" in page and "Cells: each round" in page
    assert "<div class='plot' id='a-decode-tok-s-decode-64-24t-reference'>" in page
    assert "<script src='plotly.min.js'>" in page and (site / "plotly.min.js").is_file()
    for run_id in ids:  # each run's report is in the site
        assert f"<h1>Run {run_id}</h1>" in (site / "runs" / f"{run_id}.html").read_text()
    assert "not interleaved" in (site / "compare.html").read_text()
    assert {oct(p.stat().st_mode & 0o777) for p in site.rglob("*") if p.is_file()} == {"0o644"}


def test_load_samples_tidy(two_runs: tuple[Path, list[str]]) -> None:
    import abbench

    results, ids = two_runs
    df = abbench.load_samples(results)
    assert list(df.columns) == SAMPLE_COLUMNS
    n_expected = sum(len(r.get("metrics") or {}) for run in list_runs(results)
                     for r in (x.data() for x in run.records())
                     if r.get("type") in ("sample", "startup"))  # start-up rows too
    assert len(df) == n_expected
    assert set(df["run_id"]) == set(ids) and set(df["label"]) == {"prod", "pr"}
    dec = df[df.metric == "decode_tok_s"].groupby("label")["value"].mean()
    assert dec["pr"] > dec["prod"]
    assert str(df["created"].dtype).startswith("datetime64") and df["is_baseline"].any()


# ---------------------------------------------------------------- regressions


# ---------------------------------------------------------------- the index


# ---------------------------------------------------------------- bad input


def test_report_is_the_same_as_the_run_wrote(two_runs: tuple[Path, list[str]]) -> None:
    results, ids = two_runs
    run = Run(results / ids[0])
    from abbench.report.markdown import render_markdown

    assert render_markdown(run_table(run)) == (run.path / "report.md").read_text()


