"""The command line: parse, call one core function, render. No logic here."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from abbench.errors import AbbenchError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Interleaved A/B benchmarking of LLM inference-server builds.")

ResultsOpt = Annotated[Path | None, typer.Option("--results", help="results directory "
                                                 "(default: the arms file's results:, or "
                                                 "results/)")]


UntilCiOpt = Annotated[str | None, typer.Option(
    "--until-ci", help="add balanced blocks of rounds until every interval's half-width is at "
    "most this, e.g. 1% (stats.until_ci)")]
MaxRoundsOpt = Annotated[int | None, typer.Option(
    "--max-rounds", min=2, help="cap on rounds with --until-ci (stats.max_rounds)")]


def _fail(e: AbbenchError) -> None:
    typer.echo(f"Error: {e}", err=True)
    raise typer.Exit(e.exit_code)


@app.command()
def run(
    arms_file: Annotated[Path | None, typer.Argument(help="the arms file (YAML)")] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, help="override rounds:")] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, help="override seed:")] = None,
    results: ResultsOpt = None,
    live: Annotated[bool | None, typer.Option("--live/--plain", help="progress display "
                                              "(default: live on a terminal)")] = None,
    until_ci: UntilCiOpt = None,
    max_rounds: MaxRoundsOpt = None,
    resume: Annotated[str | None, typer.Option("--resume", metavar="RUN", help="continue an "
                                               "interrupted run (id, prefix or folder)")] = None,
) -> None:
    """Start each arm's server in interleaved rounds, measure, print the markdown table.

    Example: abbench run arms/llama-cpu.yaml --rounds 4 --seed 7 --until-ci 1%
    """
    from abbench.config import load_config
    from abbench.errors import ConfigError
    from abbench.progress import make_progress
    from abbench.resume import resume_run
    from abbench.runner import Campaign, RunOptions
    from abbench.sequential import with_stats

    try:
        if resume is not None:
            if arms_file is not None or rounds is not None or seed is not None:
                raise ConfigError("--resume takes the arms file, rounds and seed from the run",
                                  hint=f"abbench run --resume {resume} [--results DIR]")
            outcome = resume_run(resume, results or Path("results"),
                                 progress=make_progress(live))
        elif arms_file is None:
            raise ConfigError("no arms file", hint="abbench run ARMS_FILE, or abbench run "
                              "--resume RUN to continue a run")
        else:
            cfg = with_stats(load_config(arms_file), until_ci=until_ci, max_rounds=max_rounds)
            opts = RunOptions(results=results or Path(cfg.results), rounds=rounds, seed=seed,
                              config_path=str(arms_file))
            outcome = Campaign(cfg, opts, progress=make_progress(live)).execute()
    except AbbenchError as e:
        _fail(e)
        return
    typer.echo(outcome.report_md, nl=False)
    typer.echo(f"\nStored in {outcome.run.path}", err=True)
    if outcome.failed_slots:
        raise typer.Exit(1)


@app.command()
def validate(
    arms_files: Annotated[list[Path], typer.Argument(help="one or more arms files")],
    rounds: Annotated[int | None, typer.Option("--rounds", min=1)] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0)] = None,
) -> None:
    """Check arms files and print the plan (arms, order with its seed, workloads); start nothing.

    Example: abbench validate arms/*.yaml
    """
    from abbench.config import load_config
    from abbench.plan import describe_plan

    code = 0
    for path in arms_files:
        try:
            cfg = load_config(path)
            typer.echo(describe_plan(cfg, rounds=rounds, seed=seed))
        except AbbenchError as e:
            typer.echo(f"Error: {e}", err=True)
            code = max(code, e.exit_code)
    raise typer.Exit(code)


# -- statistics commands (calibrate) below this line
@app.command()
def calibrate(
    arms_file: Annotated[Path, typer.Argument(help="the arms file (YAML)")],
    arm: Annotated[str, typer.Option("--arm", help="the arm to run against its twin")],
    rounds: Annotated[int | None, typer.Option("--rounds", min=2, help="override rounds:")]
    = None,
    effect: Annotated[str, typer.Option("--effect", help="effect size to plan rounds for")]
    = "2%",
    write_band: Annotated[Path | None, typer.Option(
        "--write-band", help="write a suggested stats: noise_bands: snippet to this file")]
    = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0)] = None,
    results: ResultsOpt = None,
    live: Annotated[bool | None, typer.Option("--live/--plain")] = None,
) -> None:
    """A/A run: one arm against its identical twin; print the noise floor per metric.

    Example: abbench calibrate arms/llama-cpu.yaml --arm f16 --rounds 6 --effect 2%
    """
    from abbench.calibrate import band_yaml, calibrate, noise_floor, render_calibration
    from abbench.config import load_config
    from abbench.progress import make_progress
    from abbench.report import build_table
    from abbench.runner import RunOptions
    from abbench.stats import fraction_option

    try:
        cfg = load_config(arms_file)
        size = fraction_option(effect, "--effect")
        opts = RunOptions(results=results or Path(cfg.results), rounds=rounds, seed=seed,
                          config_path=str(arms_file))
        outcome = calibrate(cfg, arm, opts, progress=make_progress(live))
    except AbbenchError as e:
        _fail(e)
        return
    table = build_table(outcome.run.records(), outcome.run.meta())
    floors = noise_floor(table, effect=size, settings=cfg.stats)
    typer.echo(render_calibration(floors, arm=arm, effect=size, settings=cfg.stats), nl=False)
    if write_band is not None:
        write_band.write_text(band_yaml(floors))
        typer.echo(f"Suggested noise bands written to {write_band}", err=True)
    typer.echo(f"Stored in {outcome.run.path}", err=True)
    if outcome.failed_slots:
        raise typer.Exit(1)



# -- history commands (ls, report, compare, history) below this line

ReadResultsOpt = Annotated[Path, typer.Option("--results", help="results directory")]


class TableFormat(str, Enum):
    md = "md"
    json = "json"
    csv = "csv"


class XAxisOpt(str, Enum):
    time = "time"
    commit = "commit"


def _warn(problems: list[str], most: int = 10) -> None:
    for p in problems[:most]:
        typer.echo(f"warning: {p}", err=True)
    if len(problems) > most:
        typer.echo(f"warning: ... and {len(problems) - most} more problem(s)", err=True)


@app.command("ls")
def ls_(
    results: ReadResultsOpt = Path("results"),
    label: Annotated[str | None, typer.Option(help="only runs with an arm whose label or "
                                              "name contains this")] = None,
    since: Annotated[str | None, typer.Option(help="only runs from this date on "
                                              "(2026-11-29 or ISO date-time)")] = None,
    until: Annotated[str | None, typer.Option(help="only runs up to this date "
                                              "(inclusive for a bare date)")] = None,
) -> None:
    """List stored runs: date, rounds, status, arms (labels, commits), oldest first.

    Example: abbench ls --label prod --since 2026-11-01
    """
    from abbench.history import format_runs, parse_when
    from abbench.index import open_index

    try:
        with open_index(results) as ix:
            runs = ix.runs(label=label, since=parse_when(since) if since else None,
                           until=parse_when(until, end=True) if until else None)
            problems = ix.run_errors() + ix.problems(r.id for r in runs)
    except AbbenchError as e:
        _fail(e)
        return
    _warn(problems)
    typer.echo(format_runs(runs), nl=False)


@app.command()
def report(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="run id, unique prefix, "
                                           "'latest', or run folder")],
    results: ReadResultsOpt = Path("results"),
    fmt: Annotated[TableFormat, typer.Option("--format", help="md, json or csv")] =
    TableFormat.md,
    baseline: Annotated[str | None, typer.Option(help="arm to compare against")] = None,
) -> None:
    """Re-render a stored run's table from its samples alone.

    Example: abbench report 20261129-2319 --format csv --baseline q8
    """
    from abbench.compare import render, run_table
    from abbench.store import open_run

    problems: list[str] = []
    try:
        table = run_table(open_run(run_ref, results), baseline=baseline, problems=problems)
    except AbbenchError as e:
        _fail(e)
        return
    _warn(problems)
    typer.echo(render(table, fmt.value), nl=False)


@app.command()
def compare(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A[:ARM]", help="the baseline side; "
                                         "ARM defaults to the run's baseline arm")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B[:ARM]")],
    results: ReadResultsOpt = Path("results"),
    fmt: Annotated[TableFormat, typer.Option("--format", help="md, json or csv")] =
    TableFormat.md,
) -> None:
    """Compare an arm of one run with an arm of another (rounds paired by index).

    Example: abbench compare 20261128-0901:f16 20261129-2319:f16
    """
    from abbench.compare import compare_table, parse_run_arm, render

    problems: list[str] = []
    try:
        table = compare_table(parse_run_arm(run_a, results), parse_run_arm(run_b, results),
                              problems=problems)
    except AbbenchError as e:
        _fail(e)
        return
    _warn(problems)
    if table.notes and fmt is not TableFormat.md:  # markdown carries them itself
        _warn(table.notes)
    typer.echo(render(table, fmt.value), nl=False)


@app.command()
def history(
    results: ReadResultsOpt = Path("results"),
    metric: Annotated[list[str] | None, typer.Option(help="metric name, repeatable "
                                                     "(default: every table metric)")] = None,
    workload: Annotated[list[str] | None, typer.Option(help="row name such as 'decode 1K', "
                                                       "repeatable (default: all)")] = None,
    label: Annotated[list[str] | None, typer.Option(help="arm label, repeatable "
                                                    "(default: all)")] = None,
    out: Annotated[Path | None, typer.Option(help="write the plot here (.png or .svg)")] =
    None,
    html: Annotated[Path | None, typer.Option(help="write DIR/index.html with every "
                                              "metric's plot and the latest table")] = None,
    check: Annotated[bool, typer.Option(help="exit 1 when the newest run regressed beyond "
                                        "--threshold")] = False,
    threshold: Annotated[float, typer.Option(min=0, help="regression threshold in percent"
                                             )] = 5.0,
    window: Annotated[int, typer.Option(min=1, help="runs in the lookback window")] = 20,
    x: Annotated[XAxisOpt, typer.Option("--x", help="x axis: run time or run (commit) "
                                        "order")] = XAxisOpt.time,
) -> None:
    """Each arm label's value per run over time, regressions marked; --check gates CI.

    Example: abbench history --metric decode_tok_s --workload "decode 1K" --out h.png --check
    """
    from abbench.history import (
        build_series,
        check_history,
        format_check,
        format_series,
        plot_history,
        write_html,
    )
    from abbench.index import open_index

    limit = threshold / 100
    try:
        with open_index(results) as ix:
            series = build_series(ix, metric, workload, label)
            problems = ix.run_errors() + ix.problems()
            latest = ix.runs()[-1:]
        verdict = check_history(series, threshold=limit, window=window) \
            if check or html is not None else None
        if out is not None:
            summary = plot_history(series, out, x=x.value, threshold=limit)
            typer.echo(f"wrote {summary.path}", err=True)
        if html is not None:
            from abbench.compare import run_table
            from abbench.store import Run

            tables = [run_table(Run(Path(r.path))) for r in latest if not r.error]
            assert verdict is not None
            page = write_html(series, html, tables=tables, check=verdict, x=x.value,
                              threshold=limit)
            typer.echo(f"wrote {page}", err=True)
    except AbbenchError as e:
        _fail(e)
        return
    _warn(problems)
    if verdict is not None and check:
        typer.echo(format_check(verdict), nl=False)
        raise typer.Exit(1 if verdict.regressions else 0)
    if out is None and html is None:
        typer.echo(format_series(series), nl=False)


# -- quality commands (diff) below this line


@app.command()
def diff(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="run id, unique prefix, "
                                           "'latest', or a run folder")],
    set_name: Annotated[str, typer.Option("--set", help="prompt set name")],
    arm: Annotated[list[str], typer.Option("--arm", help="twice: --arm A --arm B")],
    prompt: Annotated[str | None, typer.Option("--prompt", help="only this prompt id")] = None,
    round_: Annotated[int | None, typer.Option("--round", help="this round's outputs (default: "
                                               "each prompt's most common output)")] = None,
    warm: Annotated[bool, typer.Option("--warm", help="the warm pass, not the cold")] = False,
    width: Annotated[int, typer.Option("--width", min=16, help="column width")] = 48,
    results: ResultsOpt = None,
) -> None:
    """Show two arms' differing greedy outputs side by side, divergence marked.

    Example: abbench diff latest --set basics --arm f16 --arm q8
    """
    from abbench.quality_report import diff_text
    from abbench.store import open_run

    try:
        run_ = open_run(run_ref, results or Path("results"))
        text = diff_text(run_.records(), run_.meta(), set_name=set_name, arms=arm,
                         prompt=prompt, pass_="warm" if warm else "cold", round_=round_,
                         width=width)
    except AbbenchError as e:
        _fail(e)
        return
    typer.echo(text, nl=False)


# -- end of commands


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # outside a run (which handles it itself)
        sys.exit(130)


if __name__ == "__main__":
    main()
