"""Stored runs over time: ls, report, compare, history (plots, --check), the index,
load_samples, and bad input. Real runs against the reference server, and
series of stored runs written with abbench's own store code."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from abbench.cli import app
from abbench.compare import run_table
from abbench.history import SAMPLE_COLUMNS, build_series, load_samples, plot_history
from abbench.index import INDEX_FILE, MIGRATIONS, open_index
from abbench.store import Run, list_runs
from tests.conftest import refserver_start, write_arms

T0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.timezone.utc)


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def make_run(results: Path, day: int, values: dict[str, list[float]], *,
             commits: dict[str, str] | None = None, workload: str = "decode 1K",
             status: str = "complete") -> Run:
    """A stored run whose arms (named by their labels) decoded at ``values`` tok/s, one
    value per round, written with abbench's own store code."""
    created = T0 + dt.timedelta(days=day)
    rounds = max(len(v) for v in values.values())
    meta = {"id": f"{created:%Y%m%d-%H%M%S}-{day:04x}", "created": created.isoformat(),
            "status": status, "abbench": "test",
            "arms": [{"name": a, "label": a, "commit": (commits or {}).get(a)} for a in values],
            "baseline": next(iter(values)), "rounds": rounds, "rounds_done": rounds, "reps": 1,
            "order": "interleaved", "seed": day, "environment": {"host": "t", "cpu": "cpu"}}
    run = Run.create(results, meta, {"rounds": rounds})
    for pos, (arm, vals) in enumerate(values.items()):
        for rnd, v in enumerate(vals):
            run.append({"type": "sample", "slot": rnd * len(values) + pos, "arm": arm,
                        "round": rnd, "position": pos, "rep": 0, "workload": workload,
                        "context": 1024, "decode_tokens": 32, "t": created.timestamp() + rnd,
                        "valid": True, "status": "ok", "reason": None,
                        "metrics": {"decode_tok_s": v, "ttft_ms": 20000.0 / v}})
            run.append({"type": "slot", "slot": rnd * len(values) + pos, "arm": arm,
                        "round": rnd, "position": pos, "status": "ok", "reason": None})
    return run


def noisy_series(results: Path, n: int, *, seed: int = 1, slow_from: int | None = None,
                 factor: float = 0.9) -> list[Run]:
    """``n`` runs of arms base and cand at 100 and 110 tok/s with 1% noise; from run
    ``slow_from`` on, cand is ``factor`` times as fast."""
    rng = np.random.default_rng(seed)
    runs = []
    for i in range(n):
        cand = 110 * (factor if slow_from is not None and i >= slow_from else 1.0)
        vals = {"base": list(100 * np.exp(rng.normal(0, 0.01, 3))),
                "cand": list(cand * np.exp(rng.normal(0, 0.01, 3)))}
        runs.append(make_run(results, i, vals, commits={"cand": f"c{i:06x}"}))
    return runs


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
    assert summary.panels[0].points == {"prod": 2, "pr": 2}
    assert (tmp_path / "h.svg").read_text().lstrip().startswith("<?xml")
    code, out, _ = cli("history", "--results", results)
    assert code == 0 and "decode_tok_s [decode 64] prod: 2 run(s)" in out


def test_history_html_page(two_runs: tuple[Path, list[str]], tmp_path: Path) -> None:
    results, ids = two_runs
    code, _, err = cli("history", "--results", results, "--html", tmp_path / "site")
    assert code == 0, err
    page = (tmp_path / "site" / "index.html").read_text()
    assert f"Latest table: run {ids[1]}" in page and "<td>" in page
    imgs = [p.name for p in (tmp_path / "site").glob("*.svg")]
    assert "plot-decode-tok-s-decode-64.svg" in imgs
    assert all(f"src='{n}'" in page for n in imgs)


def test_load_samples_tidy(two_runs: tuple[Path, list[str]]) -> None:
    import abbench

    results, ids = two_runs
    df = abbench.load_samples(results)
    assert list(df.columns) == SAMPLE_COLUMNS
    n_expected = sum(len(r.get("metrics") or {}) for run in list_runs(results)
                     for r in run.records() if r.get("type") == "sample")
    assert len(df) == n_expected
    assert set(df["run_id"]) == set(ids) and set(df["label"]) == {"prod", "pr"}
    dec = df[df.metric == "decode_tok_s"].groupby("label")["value"].mean()
    assert dec["pr"] > dec["prod"]
    assert str(df["created"].dtype).startswith("datetime64") and df["is_baseline"].any()


# ---------------------------------------------------------------- regressions


def test_check_flags_planted_slowdown(results: Path) -> None:
    runs = noisy_series(results, 8, slow_from=7)
    code, out, _ = cli("history", "--results", results, "--check")
    assert code == 1, out
    assert "REGRESSION decode_tok_s [decode 1K] cand" in out
    assert f"in run {runs[-1].id}, since run {runs[-1].id}" in out
    change = float(out.split(": ")[1].split("%")[0])
    assert -12 < change < -8
    assert "base" not in out  # the baseline arm did not move


def test_check_noise_only_exits_0(results: Path) -> None:
    noisy_series(results, 10, seed=3)
    code, out, _ = cli("history", "--results", results, "--check")
    assert code == 0, out
    assert out.startswith("OK:") and "2 series checked" in out


def test_check_names_the_run_a_step_began(results: Path) -> None:
    runs = noisy_series(results, 10, slow_from=7)
    code, out, _ = cli("history", "--results", results, "--check", "--label", "cand")
    assert code == 1
    assert f"since run {runs[7].id} (last good: {runs[6].id}; step)" in out
    # a looser threshold lets it pass
    assert cli("history", "--results", results, "--check", "--threshold", "15")[0] == 0


def test_check_respects_direction(results: Path) -> None:
    # faster decode: an improvement for tok/s, and TTFT (lower is better) falls too
    noisy_series(results, 8, slow_from=7, factor=1.1)
    assert cli("history", "--results", results, "--check")[0] == 0
    assert cli("history", "--results", results, "--check", "--metric", "ttft_ms")[0] == 0
    # slower decode: TTFT (20000 / tok/s here) rises, a regression in its direction
    noisy_series(results / "slow", 8, slow_from=7, factor=0.9)
    code, out, _ = cli("history", "--results", results / "slow", "--check", "--metric",
                       "ttft_ms")
    assert code == 1 and "ttft_ms" in out and "(lower is better)" in out


def test_plot_marks_the_regression(results: Path, tmp_path: Path) -> None:
    noisy_series(results, 10, slow_from=6)
    with open_index(results) as ix:
        series = build_series(ix, ["decode_tok_s"])
    summary = plot_history(series, tmp_path / "p.png")
    assert summary.panels[0].points == {"base": 10, "cand": 10}
    assert summary.panels[0].marked == 1


# ---------------------------------------------------------------- the index


def test_index_follows_the_folders(results: Path) -> None:
    runs = noisy_series(results, 3)
    with open_index(results) as ix:
        assert [r.id for r in ix.runs()] == [r.id for r in runs]
        assert ix.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert len(ix.round_values("decode_tok_s")) == 3 * 2 * 3
    # a new sample in run 0 (a 4th round) is seen; a removed run is dropped
    runs[0].append({"type": "sample", "arm": "base", "round": 3, "rep": 0, "valid": True,
                    "workload": "decode 1K", "metrics": {"decode_tok_s": 50.0}})
    import shutil

    shutil.rmtree(runs[2].path)
    with open_index(results) as ix:
        assert [r.id for r in ix.runs()] == [runs[0].id, runs[1].id]
        vals = [v.value for v in ix.round_values("decode_tok_s", labels=["base"])
                if v.run_id == runs[0].id]
        assert len(vals) == 4 and 50.0 in vals
        stats = ix.refresh()
        assert stats.read == 0 and stats.scanned == 2


def test_index_damaged_or_newer(results: Path) -> None:
    noisy_series(results, 2)
    (results / INDEX_FILE).write_bytes(b"this is not a database" * 100)
    with open_index(results) as ix:  # rebuilt from the run folders
        assert len(ix.runs()) == 2
    db = sqlite3.connect(results / INDEX_FILE)
    db.execute("PRAGMA user_version = 99")
    db.close()
    code, _, err = cli("ls", "--results", results)
    assert code == 2 and "schema version 99" in err and "delete the index file" in err
    (results / INDEX_FILE).unlink()
    assert cli("ls", "--results", results)[0] == 0


# ---------------------------------------------------------------- bad input


def test_corrupt_lines_reported_and_skipped(results: Path) -> None:
    run = make_run(results, 0, {"base": [100.0, 101.0], "cand": [110.0, 111.0]})
    lines = run.samples_path.read_text().splitlines()
    lines.insert(2, '{"schema": 1, "type": "sample", "arm": "ba')  # torn by a crash
    lines.append('{"schema": 7, "type": "sample"}')
    run.samples_path.write_text("\n".join(lines) + "\n")
    code, out, err = cli("report", run.id, "--results", results)
    assert code == 0
    assert f"{run.samples_path}:3: skipped a corrupt line" in err
    assert f"{run.samples_path}:{len(lines)}: skipped a record of schema 7" in err
    assert "| 100.00 / 101.00 | 110.00 / 111.00" in out  # the rest is kept
    code, out, err = cli("ls", "--results", results)
    assert code == 0 and f"{run.samples_path}:3" in err and run.id in out
    problems: list[str] = []
    df = load_samples(results, problems)
    assert len(problems) == 2 and len(df) == 8
    with pytest.warns(UserWarning, match="2 problem"):
        load_samples(results)


def test_unknown_run_gives_closest(results: Path) -> None:
    runs = noisy_series(results, 2)
    typo = runs[0].id[:-1] + "x"
    code, _, err = cli("report", typo, "--results", results)
    assert code == 2
    assert f"run {typo!r} not found" in err and f"closest: {runs[0].id}" in err
    code, _, err = cli("compare", runs[0].id, "nope", "--results", results)
    assert code == 2 and "not found" in err


def test_unreadable_run_json(results: Path) -> None:
    run = make_run(results, 0, {"base": [100.0], "cand": [110.0]})
    meta = json.loads((run.path / "run.json").read_text())
    (run.path / "run.json").write_text(json.dumps({**meta, "schema": 99}))
    code, out, err = cli("ls", "--results", results)
    assert code == 0 and "unreadable" in out and "schema version 99" in err
    code, _, err = cli("report", run.id, "--results", results)
    assert code == 2 and "upgrade abbench" in err


def test_bad_history_options(results: Path, tmp_path: Path) -> None:
    noisy_series(results, 2)
    code, _, err = cli("history", "--results", results, "--out", tmp_path / "x.gif")
    assert code == 2 and ".png or .svg" in err
    code, _, err = cli("history", "--results", results, "--out", tmp_path / "x.png",
                       "--workload", "decode 9K")
    assert code == 2 and "nothing to plot" in err
    assert cli("ls", "--results", results, "--since", "yesterday")[0] == 2


def test_report_is_the_same_as_the_run_wrote(two_runs: tuple[Path, list[str]]) -> None:
    results, ids = two_runs
    run = Run(results / ids[0])
    from abbench.report import render_markdown

    assert render_markdown(run_table(run)) == (run.path / "report.md").read_text()


def test_ls_shows_every_status(results: Path) -> None:
    make_run(results, 0, {"base": [100.0], "cand": [110.0]})
    make_run(results, 1, {"base": [100.0], "cand": [110.0]}, status="interrupted")
    failed = make_run(results, 2, {"base": [100.0], "cand": [110.0]}, status="failed")
    failed.append({"type": "slot", "arm": "cand", "round": 1, "status": "failed",
                   "reason": "server exited"})
    failed.append({"type": "sample", "arm": "cand", "round": 1, "rep": 0, "valid": False,
                   "status": "failed", "workload": "decode 1K", "metrics": {}})
    code, out, _ = cli("ls", "--results", results)
    lines = out.splitlines()[1:]
    assert code == 0 and len(lines) == 3
    assert " complete " in lines[0] and " interrupted " in lines[1]
    assert "failed (1 failed slot(s), 1 invalid sample(s))" in lines[2]
    assert "2026-11-02 09:00" in lines[1]
