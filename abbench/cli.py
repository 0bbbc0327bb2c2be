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
) -> None:
    """Start each arm's server in interleaved rounds, measure, print the markdown table.

    Example: abbench run arms/llama-cpu.yaml --rounds 4 --seed 7
    """
    from abbench.config import load_config
    from abbench.progress import make_progress
    from abbench.runner import Campaign, RunOptions

    try:
        cfg = load_config(arms_file)
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


# -- history commands (ls, report, compare, history) below this line


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
