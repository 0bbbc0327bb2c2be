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
    arms_file: Annotated[Path | None, typer.Argument(help="the arms file (YAML)")] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, help="override rounds:")] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, help="override seed:")] = None,
    results: ResultsOpt = None,
    live: Annotated[bool | None, typer.Option("--live/--plain", help="progress display "
                                              "(default: live on a terminal)")] = None,
    resume: Annotated[str | None, typer.Option("--resume", metavar="RUN", help="continue an "
                                               "interrupted run (id, prefix or folder)")] = None,
) -> None:
    """Start each arm's server in interleaved rounds, measure, print the markdown table.

    Example: abbench run arms/llama-cpu.yaml --rounds 4 --seed 7
    """
    from abbench.config import load_config
    from abbench.errors import ConfigError
    from abbench.progress import make_progress
    from abbench.resume import resume_run
    from abbench.runner import Campaign, RunOptions

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


# -- end of commands


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # outside a run (which handles it itself)
        sys.exit(130)


if __name__ == "__main__":
    main()
