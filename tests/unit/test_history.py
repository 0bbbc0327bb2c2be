"""Stored runs over time: ls, report, compare, history (plots, --check), the index,
load_samples, and bad input. Real runs against the reference server, and
series of stored runs written with abbench's own store code."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from abbench.cli import app
from abbench.config.arms import resolve_arms
from abbench.history.plot import plot_history
from abbench.history.series import build_series, load_samples
from abbench.model.records import parse_record
from abbench.store.index import INDEX_FILE, MIGRATIONS, open_index
from abbench.store.run import Run

T0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.timezone.utc)


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def make_run(results: Path, day: int, values: dict[str, list[float]], *,
             commits: dict[str, str] | None = None, workload: str = "decode 1K",
             status: str = "complete",
             extra: dict[str, dict[str, list[float]]] | None = None) -> Run:
    """A stored run whose arms (named by their labels) decoded at ``values`` tok/s, one
    value per round, written with abbench's own store code; ``extra``: more metrics,
    {metric: {arm: a value per round}}."""
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
            run.append(parse_record({"type": "sample", "slot": rnd * len(values) + pos, "arm": arm,
                        "round": rnd, "position": pos, "rep": 0, "workload": workload,
                        "context": 1024, "decode_tokens": 32, "t": created.timestamp() + rnd,
                        "valid": True, "status": "ok", "reason": None,
                        "metrics": {"decode_tok_s": v, "ttft_ms": 20000.0 / v, **{
                            m: by_arm[arm][rnd] for m, by_arm in (extra or {}).items()}}}))
            run.append(parse_record({"type": "slot", "slot": rnd * len(values) + pos, "arm": arm,
                        "round": rnd, "position": pos, "status": "ok", "reason": None}))
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


# ---------------------------------------------------------------- regressions


def test_check_flags_planted_slowdown(results: Path) -> None:
    runs = noisy_series(results, 8, slow_from=7)
    code, out, _ = cli("history", "--results", results, "--check")
    assert code == 1, out
    assert out.startswith("REGRESSION cand: decode 1K (tok/s): ")
    assert f"began in run {runs[-1].id}; last good run {runs[-2].id}" in out
    assert "(changed; higher is better)" in out and "commits c000006..c000007" in out
    assert "abbench bisect " in out and "--good c000006 --bad c000007 --row 'decode 1K'" in out
    change = float(out.split(": ")[2].split("%")[0])
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
    assert f"began in run {runs[7].id} (the newest run, {runs[-1].id}, is still at that " \
        f"level); last good run {runs[6].id}" in out
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
    assert code == 1 and "TTFT (ms)" in out and "--metric ttft_ms" in out
    assert "(changed; lower is better)" in out


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
        assert len(ix.keyed_rounds(["decode_tok_s"])) == 3 * 2 * 3
    # a new round in run 0 (a 4th, both arms finished) is seen; a removed run is dropped
    for pos, (arm, v) in enumerate((("base", 50.0), ("cand", 55.0))):
        runs[0].append(parse_record({
            "type": "sample", "slot": 6 + pos, "arm": arm, "round": 3, "rep": 0,
                        "valid": True, "workload": "decode 1K", "metrics": {"decode_tok_s": v}}))
        runs[0].append(parse_record({"type": "slot", "slot": 6 + pos, "arm": arm, "round": 3,
                        "position": pos, "status": "ok"}))
    import shutil

    shutil.rmtree(runs[2].path)
    with open_index(results) as ix:
        assert [r.id for r in ix.runs()] == [runs[0].id, runs[1].id]
        vals = [v.value for v in ix.keyed_rounds(["decode_tok_s"])
                if v.run_id == runs[0].id and v.label == "base"]
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
                       "--label", "nobody")
    assert code == 2 and "nothing to plot" in err
    code, _, err = cli("history", "--results", results, "--out", tmp_path / "x.png",
                       "--workload", "decode 9K")  # a row no run has: refused, rows named
    assert code == 2 and "no row 'decode 9K'" in err and "'decode 1K (tok/s)'" in err
    assert cli("ls", "--results", results, "--since", "yesterday")[0] == 2


def test_ls_shows_every_status(results: Path) -> None:
    make_run(results, 0, {"base": [100.0], "cand": [110.0]})
    make_run(results, 1, {"base": [100.0], "cand": [110.0]}, status="interrupted")
    failed = make_run(results, 2, {"base": [100.0], "cand": [110.0]}, status="failed")
    failed.append(parse_record({"type": "slot", "arm": "cand", "round": 1, "status": "failed",
                   "reason": "server exited"}))
    failed.append(parse_record({
        "type": "sample", "arm": "cand", "round": 1, "rep": 0, "valid": False,
                   "status": "failed", "workload": "decode 1K", "metrics": {}}))
    code, out, _ = cli("ls", "--results", results)
    lines = out.splitlines()[1:]
    assert code == 0 and len(lines) == 3
    assert " complete " in lines[0] and " interrupted " in lines[1]
    assert "failed (1 failed slot(s), 1 invalid sample(s))" in lines[2]
    assert "2026-11-02 09:00" in lines[1]


def test_one_definition_of_comparable_in_report_compare_index_and_load_samples(
        results: Path) -> None:
    """Round 1's cand life failed after one sample, round 2 only ran base (interrupted):
    every reader takes round 0 alone, as the run's report does."""
    from abbench.report.compare import compare_table, run_table

    run = make_run(results, 0, {"base": [100.0, 101.0, 102.0], "cand": [110.0, 111.0]})
    lines = [json.loads(ln) for ln in run.samples_path.read_text().splitlines()]
    for rec in lines:  # cand's round 1: measured a sample, then its server died
        if rec["type"] == "slot" and rec["arm"] == "cand" and rec["round"] == 1:
            rec.update(status="failed", reason="the server died")
    run.samples_path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    other = make_run(results, 1, {"base": [100.0, 100.0, 100.0], "cand": [120.0, 121.0, 122.0]})

    table = run_table(run)
    assert {a: c.rounds for r in table.rows if r.metric == "decode_tok_s"
            for a, c in r.cells.items()} == {"base": [0], "cand": [0]}
    with open_index(results) as ix:
        vals = [(v.run_id, v.arm, v.round) for v in ix.keyed_rounds(["decode_tok_s"])
                if v.run_id == run.id]
    assert sorted(vals) == [(run.id, "base", 0), (run.id, "cand", 0)]
    df = load_samples(results)
    mine = df[(df.run_id == run.id) & (df.metric == "decode_tok_s")]
    assert sorted(mine[mine.comparable][["arm", "round"]].itertuples(index=False)) == \
        [("base", 0), ("cand", 0)]
    assert len(mine) == 5 and mine.comparable.sum() == 2  # every sample, marked
    cmp = compare_table((run, "cand"), (other, "cand"))
    cell_rounds = {a: c.rounds for r in cmp.rows if r.metric == "decode_tok_s"
                   for a, c in r.cells.items()}
    assert cell_rounds == {f"{run.id}:cand": [0], f"{other.id}:cand": [0, 1, 2]}


def test_stored_examples_keep_models_apart(tmp_path: Path) -> None:
    """docs/examples: the 8B and SmolLM2 runs of arm "prod" used to merge into one
    series (+196.7% in `history`); the model file now keys the series."""
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    results = tmp_path / "results"
    for run_json in examples.rglob("run.json"):
        folder = run_json.parent
        dest = results / "-".join(folder.relative_to(examples).parts)
        dest.mkdir(parents=True)
        for name in ("run.json", "samples.jsonl", "config.yaml"):
            if (folder / name).is_file():
                (dest / name).write_bytes((folder / name).read_bytes())
    with open_index(results) as ix:
        series = build_series(ix, ["decode_tok_s"])
    models = {s.key.model for s in series}
    assert models == {"llama-3.1-8b-synthetic.q4_0.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"}
    prod_32k = [s for s in series if s.name == "prod" and s.workload == "decode 32K"]
    assert {s.key.model for s in prod_32k} == models
    loaded = {}  # what each run's servers said they loaded, read apart from the index
    for run in results.iterdir():
        if run.is_dir():
            servers = json.loads((run / "run.json").read_text())["servers"]
            loaded[run.name] = {Path(v["model_path"]).name for v in servers.values()}
    for s in series:
        assert all(loaded[p.run_id] == {s.key.model} for p in s.points), s.title
    assert len({s.slug for s in series}) == len(series)  # the site's ids, the CSV names


def test_a_declared_series_joins_arms_of_other_names(results: Path, tmp_path: Path) -> None:
    """``series: main`` in the arms file: run.json carries it, and arms named otherwise in
    other arms files join one series."""
    from abbench.campaign.describe import arm_meta
    from abbench.config.loader import load_config

    arms = tmp_path / "arms.yaml"
    arms.write_text("arms:\n  - name: nightly\n    series: main\n    start: [srv, '{port}']\n"
                    "  - name: base\n    start: [srv, '{port}']\n"
                    "workloads:\n  - contexts: [64]\n    decode_tokens: 8\n")
    nightly, base = resolve_arms(load_config(arms))
    assert arm_meta(nightly)["series"] == "main" and "series" not in arm_meta(base)
    for day, name in enumerate(("nightly", "main-build", "nightly")):
        run = make_run(results, day, {name: [100.0, 101.0], "base": [100.0, 100.0]})
        meta = run.meta()
        meta["arms"][0]["series"] = "main"
        (run.path / "run.json").write_text(json.dumps(meta))
    with open_index(results) as ix:
        names = sorted((s.name, len(s.points)) for s in build_series(ix, ["decode_tok_s"]))
    assert names == [("base", 3), ("main", 3)]


def test_site_rewrites_only_changed_run_pages(results: Path, tmp_path: Path) -> None:
    runs = noisy_series(results, 3)
    site = tmp_path / "site"
    assert cli("history", "--results", results, "--html", site)[0] == 0
    pages = {r.id: site / "runs" / f"{r.id}.html" for r in runs}
    assert all(p.is_file() for p in pages.values())
    before = {k: p.stat().st_mtime_ns for k, p in pages.items()}
    runs[1].append(parse_record({"type": "slot", "slot": 99, "arm": "base", "round": 9,
                                 "status": "failed", "reason": "test"}))
    assert cli("history", "--results", results, "--html", site)[0] == 0
    after = {k: p.stat().st_mtime_ns for k, p in pages.items()}
    assert [k for k in after if after[k] != before[k]] == [runs[1].id]
