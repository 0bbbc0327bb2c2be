"""The command line: parse, call one core function (:mod:`abbench.campaign.commands`),
print what it returns. The one error boundary is :func:`command`; the one boundary of
the terminal is :func:`main` (a closed pipe, a closed terminal, an encoding that cannot
show a character, Ctrl-C outside a run)."""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core

from abbench.campaign import commands
from abbench.campaign.commands import Output
from abbench.config.secrets import environment_secrets, remember
from abbench.errors import AbbenchError
from abbench.terminal import EXIT_PIPE, guard_streams
from abbench.version import __version__

#: -h as well as --help, and help as wide as the terminal allows
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 120}

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings=CONTEXT,
                  help="Interleaved A/B benchmarking of LLM inference-server builds "
                       "(llama.cpp, vLLM, SGLang). Start with: abbench validate arms.yaml; "
                       "abbench run arms.yaml (README.md, Quick start).")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"abbench {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="print abbench's version and exit")] = False) -> None:
    """Interleaved A/B benchmarking of LLM inference-server builds."""


def command(fn: Callable[..., Output]) -> Callable[..., None]:
    """The error boundary of every command: print the :class:`Output` (its stderr lines,
    then its stdout, so that a table is the last thing on the terminal), or turn an
    :class:`AbbenchError` into ``Error: ...`` on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            out = fn(*args, **kwargs)
        except AbbenchError as e:
            typer.echo(f"Error: {e}", err=True)
            raise typer.Exit(e.exit_code) from None
        for line in out.stderr:  # notes and paths first: the result (a table) ends the output
            typer.echo(line, err=True)
        sys.stderr.flush()
        if out.stdout:
            typer.echo(out.stdout, nl=False)
        raise typer.Exit(out.code)

    return wrapper


LIVE_HELP = "progress display (default: live on a terminal)"

ResultsOpt = Annotated[Path | None, typer.Option("--results", help="results directory "
                                                 "(default: the arms file's results:, or "
                                                 "results/)")]


UntilCiOpt = Annotated[str | None, typer.Option(
    "--until-ci", help="add balanced blocks of rounds until every watched 95% interval's "
    "half-width is at most this, e.g. 1% (stats.until_ci)")]
MaxRoundsOpt = Annotated[int | None, typer.Option(
    "--max-rounds", min=2, help="cap on rounds with --until-ci (stats.max_rounds)")]


@app.command()
@command
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
                                               "interrupted run or campaign (id, prefix or "
                                               "folder)")] = None,
    shards: Annotated[int | None, typer.Option("--shards", min=1, help="split the rounds "
                                               "into N shards, one host each (with --slurm: "
                                               "default one per block of rounds)")] = None,
    slurm: Annotated[bool, typer.Option("--slurm", help="submit the shards as one Slurm job "
                                        "array, follow it, gather")] = False,
    partition: Annotated[str | None, typer.Option(help="Slurm partition")] = None,
    gres: Annotated[str | None, typer.Option(help="Slurm --gres per task, e.g. gpu:1")] = None,
    time_limit: Annotated[str | None, typer.Option("--time", help="Slurm time limit per "
                                                   "task (HH:MM:SS)")] = None,
    exclusive: Annotated[bool, typer.Option("--exclusive/--no-exclusive", help="whole "
                                            "nodes per task")] = True,
    allow_mixed_hosts: Annotated[bool, typer.Option(
        "--allow-mixed-hosts", help="pool hosts whose GPUs, driver or CUDA differ")] = False,
) -> Output:
    """Start each arm's server in interleaved rounds, measure, print the markdown table.

    Example: abbench run arms/llama-cpu.yaml --rounds 4 --seed 7 --until-ci 1%;
    many hosts: abbench run arms.yaml --slurm --shards 4 --rounds 16 --gres gpu:1
    """
    return commands.run(arms_file, rounds=rounds, seed=seed, results=results, live=live,
                        until_ci=until_ci, max_rounds=max_rounds, resume=resume,
                        shards=shards, slurm=slurm, partition=partition, gres=gres,
                        time_limit=time_limit, exclusive=exclusive,
                        allow_mixed_hosts=allow_mixed_hosts)


shard_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        context_settings=CONTEXT,
                        help="One shard of a campaign over many hosts.")
app.add_typer(shard_app, name="shard")


@shard_app.command("run")
@command
def shard_run(
    campaign_dir: Annotated[Path, typer.Argument(metavar="CAMPAIGN_DIR", help="the folder "
                                                 "abbench run --shards made")],
    index: Annotated[int | None, typer.Option("--index", min=0, help="the shard (default: "
                                              "$JOB_COMPLETION_INDEX, then "
                                              "$SLURM_ARRAY_TASK_ID)")] = None,
    live: Annotated[bool | None, typer.Option("--live/--plain", help=LIVE_HELP)] = None,
) -> Output:
    """Run one shard's rounds on this host, into CAMPAIGN_DIR/shards/<index>-<host>/.

    Example: abbench shard run results/20261201-0930-ab12 --index 3
    """
    return commands.shard_run(campaign_dir, index=index, live=live)


@app.command()
@command
def gather(
    campaign_dir: Annotated[Path, typer.Argument(metavar="CAMPAIGN_DIR", help="the folder "
                                                 "abbench run --shards made")],
    allow_mixed_hosts: Annotated[bool, typer.Option(
        "--allow-mixed-hosts", help="pool hosts whose GPUs, driver or CUDA differ")] = False,
) -> Output:
    """Merge a campaign's shards into one run (hosts as blocks) and print its table.

    Example: abbench gather results/20261201-0930-ab12
    """
    return commands.gather(campaign_dir, allow_mixed_hosts=allow_mixed_hosts)


@app.command()
@command
def validate(
    arms_files: Annotated[list[Path], typer.Argument(metavar="ARMS_FILE",
                                                     help="one or more arms files")],
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, metavar="N",
                                               help="plan this many rounds (override "
                                               "rounds:)")] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, metavar="N",
                                             help="plan the order with this seed (run draws "
                                             "its own unless given one)")] = None,
) -> Output:
    """Check arms files and print the plan (arms, order with its seed, workloads); start nothing.

    Example: abbench validate arms/*.yaml
    """
    return commands.validate(arms_files, rounds=rounds, seed=seed)


@app.command()
@command
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
    seed: Annotated[int | None, typer.Option("--seed", min=0, metavar="N",
                                             help="override seed:")] = None,
    results: ResultsOpt = None,
    live: Annotated[bool | None, typer.Option("--live/--plain", help=LIVE_HELP)] = None,
) -> Output:
    """A/A run: one arm against its identical twin; print the noise floor per metric.

    Example: abbench calibrate arms/llama-cpu.yaml --arm f16 --rounds 6 --effect 2%
    """
    return commands.calibrate_arm(arms_file, arm=arm, rounds=rounds, effect=effect,
                                  write_band=write_band, seed=seed, results=results, live=live)


ReadResultsOpt = Annotated[Path, typer.Option("--results", help="results directory")]


class TableFormat(str, Enum):
    md = "md"
    json = "json"
    csv = "csv"
    bencher = "bencher"
    github = "github"


class RowsOpt(str, Enum):
    table = "table"
    all = "all"


class XAxisOpt(str, Enum):
    time = "time"
    commit = "commit"


@app.command("ls")
@command
def ls_(
    results: ReadResultsOpt = Path("results"),
    label: Annotated[str | None, typer.Option(help="only runs with an arm whose label or "
                                              "name contains this")] = None,
    since: Annotated[str | None, typer.Option(help="only runs from this date on "
                                              "(2026-11-29 or ISO date-time)")] = None,
    until: Annotated[str | None, typer.Option(help="only runs up to this date "
                                              "(inclusive for a bare date)")] = None,
) -> Output:
    """List stored runs: date, rounds, status, arms (labels, commits), oldest first.

    Example: abbench ls --label prod --since 2026-11-01
    """
    return commands.list_runs(results, label=label, since=since, until=until)


@app.command()
@command
def report(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="run id, unique prefix, "
                                           "'latest', or run folder")],
    results: ReadResultsOpt = Path("results"),
    fmt: Annotated[TableFormat, typer.Option("--format", help="md, json, csv, bencher "
                                             "(Bencher Metric Format JSON) or github (a job "
                                             "summary, appended to $GITHUB_STEP_SUMMARY "
                                             "when set)")] = TableFormat.md,
    baseline: Annotated[str | None, typer.Option(help="arm to compare against")] = None,
    rows: Annotated[RowsOpt, typer.Option("--rows", help="table: the run's table: rows; "
                                          "all: every recorded metric")] = RowsOpt.table,
) -> Output:
    """Re-render a stored run's table from its samples alone.

    Example: abbench report 20261129-2319 --format csv --baseline q8 --rows all
    """
    return commands.report(run_ref, results, fmt=fmt.value, baseline=baseline, rows=rows.value)


@app.command()
@command
def compare(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A[:ARM]", help="the baseline side; "
                                         "ARM defaults to the run's baseline arm")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B[:ARM]", help="the other side")],
    results: ReadResultsOpt = Path("results"),
    fmt: Annotated[TableFormat, typer.Option("--format", help="md, json, csv, bencher or "
                                             "github (as abbench report)")] =
    TableFormat.md,
) -> Output:
    """Compare an arm of one run with an arm of another (rounds paired by index).

    Example: abbench compare 20261128-0901:f16 20261129-2319:f16
    """
    return commands.compare(run_a, run_b, results, fmt=fmt.value)


@app.command()
@command
def history(
    results: ReadResultsOpt = Path("results"),
    metric: Annotated[list[str] | None, typer.Option(help="metric name, repeatable "
                                                     "(default: every table metric)")] = None,
    workload: Annotated[list[str] | None, typer.Option(help="a row as the table labels it "
                                                       "('decode 1K', 'decode 1K TTFT') or "
                                                       "its row id, repeatable (default: "
                                                       "all)")] = None,
    label: Annotated[list[str] | None, typer.Option(help="arm label, repeatable "
                                                    "(default: all)")] = None,
    out: Annotated[Path | None, typer.Option(help="write the plot here (.png or .svg)")] =
    None,
    html: Annotated[Path | None, typer.Option(help="write a static site to DIR: per series "
                                              "an interactive plot, run reports, compare "
                                              "views, the latest table")] = None,
    otava: Annotated[Path | None, typer.Option(help="write DIR/<series>.csv and "
                                               "DIR/otava.yaml for apache-otava")] = None,
    check: Annotated[bool, typer.Option(help="exit 1 when the newest run regressed beyond "
                                        "--threshold")] = False,
    threshold: Annotated[float, typer.Option(min=0, help="regression threshold in percent"
                                             )] = 5.0,
    x: Annotated[XAxisOpt, typer.Option("--x", help="x axis: run time or run (commit) "
                                        "order")] = XAxisOpt.time,
    window: Annotated[int | None, typer.Option(min=1, hidden=True)] = None,
) -> Output:
    """Each series (an arm's row and metric on one model) over runs, change points
    judged with each run's rounds; --check gates CI; --html writes a site.

    Example: abbench history --metric decode_tok_s --workload "decode 1K" --out h.png --check
    """
    return commands.history(results, metrics=metric, workloads=workload, labels=label,
                            out_path=out, html=html, otava=otava, check=check,
                            threshold=threshold, x=x.value, window=window)


@app.command()
@command
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
) -> Output:
    """Show two arms' differing greedy outputs side by side, divergence marked.

    Example: abbench diff latest --set basics --arm f16 --arm q8
    """
    return commands.diff(run_ref, results or Path("results"), set_name=set_name, arms=arm,
                         prompt=prompt, round_=round_, warm=warm, width=width)


@app.command()
@command
def cancel(
    campaign: Annotated[str, typer.Argument(metavar="CAMPAIGN", help="campaign folder, id "
                                            "or unique prefix")],
    results: ReadResultsOpt = Path("results"),
) -> Output:
    """Stop every Slurm job of a campaign (its tasks then read CANCELLED, not UNKNOWN).

    Example: abbench cancel results/20261201-0900-ab12
    """
    return commands.cancel(campaign, results)


@app.command()
@command
def build(
    arms_file: Annotated[Path, typer.Argument(help="the arms file (YAML)")],
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="parallel build "
                                             "jobs (default: $ABBENCH_JOBS or the CPUs)")]
    = None,
) -> Output:
    """Build every git arm of an arms file (or find it in the build cache).

    Example: abbench build arms/git-refs.yaml
    """
    return commands.build(arms_file, jobs=jobs, live=lambda line: typer.echo(line, err=True))


@app.command()
@command
def bisect(
    arms_file: Annotated[Path, typer.Argument(help="an arms file with a git arm")],
    good: Annotated[str, typer.Option("--good", help="a ref where the row is as before")],
    bad: Annotated[str, typer.Option("--bad", help="a ref where the row has moved")],
    row: Annotated[str, typer.Option("--row", help="the row: its id or its label as the "
                                     "table shows it, e.g. 'decode 32K' or 'decode 32K TTFT'")],
    metric: Annotated[str | None, typer.Option("--metric", help="the metric (default: the "
                                               "one --row's label names, else "
                                               "decode_tok_s)")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", min=1, metavar="N",
                                                  help="stop after this many steps "
                                                  "(default: until one commit is left)")]
    = None,
    until_ci: UntilCiOpt = None,
    results: ResultsOpt = None,
    live: Annotated[bool | None, typer.Option("--live/--plain", help=LIVE_HELP)] = None,
) -> Output:
    """Find the commit between --good and --bad that moved a row (one stored run a step).

    Example: abbench bisect arms/git-refs.yaml --good base --bad slow --row "decode 1K"
    """
    return commands.bisect(arms_file, good=good, bad=bad, row=row, metric=metric,
                           max_steps=max_steps, results=results, live=live, until_ci=until_ci)


builds_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         context_settings=CONTEXT,
                         help="The build cache ($ABBENCH_BUILD_CACHE, else "
                              "$ABBENCH_CACHE, default ~/.cache/abbench).")
app.add_typer(builds_app, name="builds")


@builds_app.command("ls")
@command
def builds_ls() -> Output:
    """List cached builds: source, ref, commit, size, created, last used.

    Example: abbench builds ls
    """
    return commands.builds_ls()


@builds_app.command("gc")
@command
def builds_gc(
    keep_days: Annotated[float | None, typer.Option("--keep-days", min=0, help="remove "
                                                    "builds unused for this many days")] = None,
    max_gib: Annotated[float | None, typer.Option("--max-gib", min=0, help="then the least "
                                                  "recently used until the rest fits")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only say what would go")] = False,
) -> Output:
    """Remove failed builds, and old ones by --keep-days / --max-gib.

    Example: abbench builds gc --keep-days 30
    """
    return commands.builds_gc(keep_days=keep_days, max_gib=max_gib, dry_run=dry_run)


trace_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Traces for trace: and sessions: workloads (docs/traffic.md).")
app.add_typer(trace_app, name="trace")


class TraceKind(str, Enum):
    mooncake = "mooncake"
    sessions = "sessions"


def _opt(help_: str) -> Any:
    return typer.Option(help=help_)


@trace_app.command("make")
@command
def trace_make(
    kind: Annotated[TraceKind, typer.Option("--kind", help="mooncake (timestamps, hash_ids) "
                                            "or sessions (multi-turn chat turns)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="the JSONL file to write")],
    seed: Annotated[int, typer.Option("--seed", min=0, help="the generator's seed")] = 1,
    requests: Annotated[int | None, _opt("mooncake: requests")] = None,
    sessions: Annotated[int | None, _opt("sessions: conversations")] = None,
    rate: Annotated[float | None, _opt("requests (mooncake) or conversations (sessions) "
                                       "started per second")] = None,
    burstiness: Annotated[float | None, _opt("gamma shape of arrival gaps: 1 Poisson, "
                                             "below 1 burstier")] = None,
    input_mean: Annotated[float | None, _opt("mooncake: mean prompt tokens")] = None,
    input_sigma: Annotated[float | None, _opt("mooncake: lognormal sigma of prompt "
                                              "lengths (0 exact)")] = None,
    output_mean: Annotated[float | None, _opt("mooncake: mean output tokens")] = None,
    output_sigma: Annotated[float | None, _opt("mooncake: lognormal sigma of output "
                                               "lengths (0 exact)")] = None,
    shared_share: Annotated[float | None, _opt("mooncake: share of prompt tokens an "
                                               "earlier request sent as a prefix")] = None,
    prefix_groups: Annotated[int | None, _opt("mooncake: distinct shared prefixes")] = None,
    block_tokens: Annotated[int | None, _opt("mooncake: tokens per hash_id block")] = None,
    turns: Annotated[int | None, _opt("sessions: turns per conversation")] = None,
    prefix_tokens: Annotated[int | None, _opt("sessions: the shared prefix")] = None,
    user_tokens: Annotated[int | None, _opt("sessions: mean tokens a turn appends")] = None,
    output_tokens: Annotated[int | None, _opt("sessions: mean output tokens a turn")] = None,
    think_s: Annotated[float | None, _opt("sessions: mean think time between turns")] = None,
    spread: Annotated[float | None, _opt("sessions: lognormal spread of lengths (0 exact)")]
    = None,
    side_share: Annotated[float | None, _opt("sessions: share of turns with a side call")]
    = None,
) -> Output:
    """Write a seeded trace and print its statistics (asked against measured).

    Example: abbench trace make --kind mooncake --seed 1 --requests 1000 --rate 2 -o t.jsonl
    """
    given = {k: v for k, v in locals().items()
             if k not in ("kind", "out", "seed") and v is not None}
    return commands.trace_make(kind=kind.value, out=out, seed=seed, params=given)


@trace_app.command("stats")
@command
def trace_stats(
    path: Annotated[Path, typer.Argument(metavar="TRACE", help="the trace (JSONL)")],
    kind: Annotated[TraceKind, typer.Option("--kind", help="its format")] = TraceKind.mooncake,
    block_tokens: Annotated[int, typer.Option("--block-tokens", min=1, help="tokens per "
                                              "hash_id block (Mooncake: 512)")] = 512,
) -> Output:
    """Print a trace's statistics: lengths, rate, burstiness, designed prefix reuse.

    Example: abbench trace stats conversation_trace.jsonl
    """
    return commands.trace_stats_of(kind=kind.value, path=path, block_tokens=block_tokens)


#: what an option's value is, in its help: by parameter name, then by the type typer
#: would show (``<int range>``)
METAVARS = {"results": "DIR", "html": "DIR", "otava": "DIR", "out": "FILE",
            "write_band": "FILE", "until_ci": "PCT", "effect": "PCT", "threshold": "PCT",
            "arm": "ARM", "baseline": "ARM", "metric": "METRIC", "workload": "ROW",
            "row": "ROW", "label": "LABEL", "since": "DATE", "until": "DATE", "good": "REF",
            "bad": "REF", "set_name": "SET", "prompt": "ID", "time_limit": "HH:MM:SS",
            "partition": "NAME", "gres": "GRES", "keep_days": "DAYS", "max_gib": "GIB",
            "<int>": "N", "<int range>": "N", "<float>": "X", "<float range>": "X",
            "<str>": "TEXT", "<list[str]>": "TEXT", "<path>": "PATH"}


class _Command(typer.core.TyperCommand):
    """Help that names each value (ARMS_FILE..., DIR, N), never by the python type typer
    shows by default (``<list[Path]>``, ``<int range>``, ``<str>``); choices stay
    (``<md|json|csv>``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for p in self.params:  # the usage line names them too
            if p.param_type_name == "argument" and p.metavar is None:
                p.metavar = (p.name or "value").upper()

    def format_options(self, ctx: Any, formatter: Any) -> None:
        rows: dict[str, list[tuple[str, str]]] = {"argument": [], "option": []}
        for p in self.get_params(ctx):
            shown = p.display_type(ctx) if isinstance(p, typer.core.TyperOption) else ""
            if shown and "|" not in shown and not getattr(p, "is_flag", False) \
                    and p.metavar is None:
                p.metavar = METAVARS.get(p.name or "") or METAVARS.get(shown, "VALUE")
            record = p.get_help_record(ctx)
            if record is not None and p.param_type_name == "argument":  # typer adds <type>
                record = (f"{p.metavar}{'...' if p.nargs != 1 else ''}", record[1])
            if record is not None:
                rows[p.param_type_name].append(record)
        for title, kind in (("Arguments", "argument"), ("Options", "option")):
            if rows[kind]:
                with formatter.section(title):
                    formatter.write_dl(rows[kind])


def _polish(group: typer.Typer) -> None:
    """Each command's help as :class:`_Command` writes it, and its docstring's first
    paragraph as its line in the command list, whole (click would cut it at about 45
    characters)."""
    for info in group.registered_commands:
        info.cls = _Command
        if info.short_help is None and info.callback is not None and info.callback.__doc__:
            info.short_help = " ".join(info.callback.__doc__.strip().split("\n\n")[0].split())
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _polish(sub.typer_instance)


_polish(app)


def main() -> None:
    remember(environment_secrets(os.environ))
    out, _err = guard_streams()
    try:
        app(standalone_mode=True)
    except KeyboardInterrupt:  # outside a run (which handles it itself)
        code: int | str | None = 130
    except SystemExit as e:
        code = e.code
    else:
        code = 0
    if out.lost == errno.EPIPE:  # the reader left: what it read was not the verdict
        code = EXIT_PIPE
    sys.exit(code)


if __name__ == "__main__":
    main()
