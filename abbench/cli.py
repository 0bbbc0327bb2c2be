"""The command line: parse, call one core function, render. No logic here."""

from __future__ import annotations

import sys
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
    arms_file: Annotated[Path, typer.Argument(help="the arms file (YAML)")],
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, help="override rounds:")] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, help="override seed:")] = None,
    results: ResultsOpt = None,
    live: Annotated[bool | None, typer.Option("--live/--plain", help="progress display "
                                              "(default: live on a terminal)")] = None,
    until_ci: UntilCiOpt = None,
    max_rounds: MaxRoundsOpt = None,
) -> None:
    """Start each arm's server in interleaved rounds, measure, print the markdown table.

    Example: abbench run arms/llama-cpu.yaml --rounds 4 --seed 7 --until-ci 1%
    """
    from abbench.config import load_config
    from abbench.progress import make_progress
    from abbench.runner import Campaign, RunOptions
    from abbench.sequential import with_stats

    try:
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


# -- quality commands (diff) below this line


# -- end of commands


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # outside a run (which handles it itself)
        sys.exit(130)


if __name__ == "__main__":
    main()
