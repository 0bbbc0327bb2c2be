"""One function per command: what ``abbench X`` does, minus parsing and printing.

Each returns an :class:`Output` (stdout text, stderr lines, exit code) that the CLI
prints as it is; every failure is an :class:`~abbench.errors.AbbenchError`, which
the CLI's one error boundary turns into ``Error: ...`` and its exit code.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from abbench.campaign.bisect import bisect as run_bisect
from abbench.campaign.calibrate import calibrate
from abbench.campaign.gather import gather as gather_campaign
from abbench.campaign.preflight import check_config
from abbench.campaign.progress import make_progress
from abbench.campaign.resume import resume_run
from abbench.campaign.runner import Campaign, RunOptions, RunOutcome
from abbench.campaign.shards import (
    CampaignOutcome,
    SlurmOptions,
    cancel_campaign,
    describe_campaign,
    find_campaign,
    plan_campaign,
    resume_campaign,
    run_on_slurm,
    run_shard,
)
from abbench.config.loader import load_config
from abbench.config.overrides import with_stats
from abbench.config.schedule_plan import plan
from abbench.config.stats import fraction_option
from abbench.errors import AbbenchError, ConfigError, StoreError
from abbench.history.check import check_history, format_check
from abbench.history.otava import write_otava
from abbench.history.plot import plot_history
from abbench.history.series import (
    build_series,
    default_metrics,
    format_runs,
    format_series,
    parse_when,
)
from abbench.history.site import write_site
from abbench.model.rows import RowKey
from abbench.report.builds import render_builds
from abbench.report.compare import Format, compare_table, parse_run_arm, render, run_table
from abbench.report.markdown import Report, note_text
from abbench.report.noise_floor import (
    band_yaml,
    noise_floor,
    noise_sources,
    render_calibration,
    render_noise_sources,
)
from abbench.report.plan import describe_plan
from abbench.report.quality_text import diff_text
from abbench.report.selection import name_rows
from abbench.report.table import table_of
from abbench.server.buildcache import gc, list_builds
from abbench.server.gitarms import build_arms, describe_pins, pin
from abbench.store.index import open_index
from abbench.store.run import open_run
from abbench.workload.tracegen import make_trace, render_stats, trace_stats

#: problems (unreadable lines, runs) listed on stderr before the rest are counted
MOST_PROBLEMS = 10


@dataclass
class Output:
    """What a command prints: ``stdout`` as is, ``stderr`` one line each, then exits."""

    stdout: str = ""
    stderr: list[str] = field(default_factory=list)
    code: int = 0

    def warn(self, problems: list[str]) -> None:
        self.stderr += [f"warning: {p}" for p in problems[:MOST_PROBLEMS]]
        if len(problems) > MOST_PROBLEMS:
            self.stderr.append(f"warning: ... and {len(problems) - MOST_PROBLEMS} more "
                               "problem(s)")


def _stored(verb: str, path: Path, report: Report) -> list[str]:
    """Where the run is, and what its report.md holds beyond the table printed last
    (then a blank line before the table)."""
    warned = f"; {report.warnings} warning(s) among them" if report.warnings else ""
    return [f"{verb} {path}",
            f"Under the table, {path / 'report.md'} holds the legend, notes and statistics "
            f"per row{warned} (abbench report {path} prints it all)", ""]


def _ran(outcome: RunOutcome, *extra: str) -> Output:
    """A finished run: the table (its report's head; the details stay in report.md);
    exit 1, naming the command that runs the failed rounds again, when some server lives
    failed."""
    run = outcome.run
    out = Output(outcome.report.head, list(extra))
    if outcome.failed_slots:
        out.code = 1
        out.stderr.append(f"{outcome.failed_slots} server life(s) failed (the report says why); "
                          f"to run their rounds again: abbench run --resume {run.id} "
                          f"--results {run.path.parent}")
    out.stderr += _stored("Stored in", run.path, outcome.report)
    return out


def _campaign(outcome: CampaignOutcome) -> Output:
    g = outcome.gathered
    hosts = len({r.host for r in g.run.records() if r.host})
    lines = [*outcome.log, *(f"warning: {p}" for p in g.problems[:MOST_PROBLEMS]),
             *_stored(f"Gathered {hosts} shard run(s) of {len(g.progress)} shard(s) into",
                      g.run.path, g.report)]
    return Output(g.report.head, lines, 0 if g.complete else 1)


def run(arms_file: Path | None, *, rounds: int | None, seed: int | None,
        results: Path | None, live: bool | None, until_ci: str | None,
        max_rounds: int | None, resume: str | None, shards: int | None = None,
        slurm: bool = False, partition: str | None = None, gres: str | None = None,
        time_limit: str | None = None, exclusive: bool = True,
        allow_mixed_hosts: bool = False) -> Output:
    """``abbench run``: a new campaign, or ``--resume`` of a stored one; with ``--shards``
    or ``--slurm``, a campaign over many hosts (:mod:`abbench.campaign.shards`)."""
    progress = make_progress(live)
    if not slurm and (partition or gres or time_limit or not exclusive):
        raise ConfigError("--partition, --gres, --time and --no-exclusive go with --slurm",
                          hint="abbench run ARMS --slurm --shards N --partition P ...")
    if resume is not None:
        if arms_file is not None or rounds is not None or seed is not None or shards:
            raise ConfigError("--resume takes the arms file, rounds and seed from the run",
                              hint=f"abbench run --resume {resume} [--results DIR]")
        folder = find_campaign(resume, results or Path("results"))
        if folder is not None:
            return _campaign(resume_campaign(folder, progress=progress))
        return _ran(resume_run(resume, results or Path("results"), progress=progress))
    if arms_file is None:
        raise ConfigError("no arms file", hint="abbench run ARMS_FILE, or abbench run "
                          "--resume RUN to continue a run")
    cfg = with_stats(load_config(arms_file), until_ci=until_ci, max_rounds=max_rounds)
    cfg, _ = build_arms(pin(cfg), log=progress.log)  # every build before any server starts
    if shards is not None or slurm:
        opts_slurm = SlurmOptions(partition, gres, time_limit, exclusive) if slurm else None
        folder = plan_campaign(cfg, arms_file, results=results or Path(cfg.results),
                               rounds=rounds, seed=seed, shards=shards,
                               allow_mixed_hosts=allow_mixed_hosts, slurm_opts=opts_slurm)
        if not slurm:
            return Output(describe_campaign(folder), [f"Campaign planned in {folder}"])
        return _campaign(run_on_slurm(folder, progress=progress))
    opts = RunOptions(results=results or Path(cfg.results), rounds=rounds, seed=seed,
                      config_path=str(arms_file))
    return _ran(Campaign(cfg, opts, progress=progress).execute())


def shard_run(folder: Path, *, index: int | None, live: bool | None) -> Output:
    """``abbench shard run``: one shard of a campaign, on this host."""
    out = run_shard(folder, index, progress=make_progress(live))
    if out.outcome is None:
        return Output("", [out.message])
    return _ran(out.outcome, out.message)


def gather(folder: Path, *, allow_mixed_hosts: bool) -> Output:
    """``abbench gather``: a campaign's shards merged into one run, and its report."""
    g = gather_campaign(folder, allow_mixed_hosts=allow_mixed_hosts or None)
    lines = [f"shard {i}: {d} of {p} rounds" for i, (d, p) in g.progress.items() if d < p]
    out = Output(g.report.head, [*lines, *_stored("Gathered into", g.run.path, g.report)],
                 0 if g.complete else 1)
    out.warn(g.problems)
    return out


def validate(arms_files: list[Path], *, rounds: int | None, seed: int | None) -> Output:
    """``abbench validate``: every file checked; the plan of each one that is good."""
    out = Output()
    for path in arms_files:
        try:
            checked = check_config(pin(load_config(path)), strict_exec=False)  # as run checks
            schedule, drawn = plan(checked.cfg, rounds=rounds, seed=seed)
            out.stdout += describe_plan(checked.cfg, schedule, drawn, rounds=rounds,
                                        warnings=checked.warnings,
                                        sets=checked.set_sources(),
                                        seed_drawn=seed is None and checked.cfg.seed is None
                                        ) + "\n"
            out.stdout += describe_pins(checked.cfg)
        except AbbenchError as e:
            out.stderr.append(f"Error: {e}")
            out.code = max(out.code, e.exit_code)
    return out


def calibrate_arm(arms_file: Path, *, arm: str, rounds: int | None, effect: str,
                  write_band: Path | None, seed: int | None, results: Path | None,
                  live: bool | None) -> Output:
    """``abbench calibrate``: the A/A run and its noise floor per row."""
    cfg = load_config(arms_file)
    size = fraction_option(effect, "--effect")
    opts = RunOptions(results=results or Path(cfg.results), rounds=rounds, seed=seed,
                      config_path=str(arms_file))
    outcome = calibrate(cfg, arm, opts, progress=make_progress(live))
    records, meta = outcome.run.records(), outcome.run.info()
    table = table_of(records, meta)
    floors = noise_floor(table, effect=size, settings=cfg.stats)
    text = render_calibration(floors, arm=arm, effect=size, settings=cfg.stats)
    sources = noise_sources(table, records, meta, effect=size, settings=cfg.stats)
    text += "\n" + render_noise_sources(sources, effect=size, labels=table.labels,
                                         settings=cfg.stats)
    outcome.run.write_text("calibration.md", text)
    extra = [f"Calibration table kept in {outcome.run.path / 'calibration.md'}"]
    if write_band is not None:
        write_band.write_text(band_yaml(floors))
        extra.append(f"Suggested noise bands written to {write_band}")
    out = _ran(outcome, *extra)
    out.stdout = text
    return out


def list_runs(results: Path, *, label: str | None, since: str | None,
              until: str | None) -> Output:
    """``abbench ls``: one line per stored run."""
    _results_folder(results)
    with open_index(results) as ix:
        runs = ix.runs(label=label, since=parse_when(since) if since else None,
                       until=parse_when(until, end=True) if until else None)
        problems = ix.run_errors() + ix.problems(r.id for r in runs)
    out = Output(format_runs(runs))
    out.warn(problems)
    return out


def report(run_ref: str, results: Path, *, fmt: Format, baseline: str | None,
           rows: Literal["table", "all"] = "table") -> Output:
    """``abbench report``: a stored run's table, computed again from its samples."""
    problems: list[str] = []
    table = run_table(open_run(run_ref, results), baseline=baseline, problems=problems,
                      rows=rows)
    out = Output(render(table, fmt))
    out.warn(problems)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if fmt == "github" and summary:
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(out.stdout + "\n")
        except OSError as e:
            raise ConfigError(f"cannot append to $GITHUB_STEP_SUMMARY: {e.strerror}",
                              where=summary, hint="check the path GitHub Actions set") from None
        out.stderr.append(f"appended the table to $GITHUB_STEP_SUMMARY ({summary})")
    return out


def compare(run_a: str, run_b: str, results: Path, *, fmt: Format) -> Output:
    """``abbench compare``: an arm of one run against an arm of another."""
    problems: list[str] = []
    table = compare_table(parse_run_arm(run_a, results), parse_run_arm(run_b, results),
                          problems=problems)
    out = Output(render(table, fmt))
    # md carries its notes; for the other formats, what differs between the runs first
    notes = [note_text(n).strip().replace("**", "").removeprefix("Warning: ")
             for n in (*table.header[1:], *table.notes)] if fmt != "md" else []
    out.warn(notes + problems)
    return out


def history(results: Path, *, metrics: list[str] | None, workloads: list[str] | None,
            labels: list[str] | None, out_path: Path | None, html: Path | None,
            otava: Path | None, check: bool, threshold: float, x: str,
            window: int | None = None) -> Output:
    """``abbench history``: series, a plot, a site, exports, or the regression gate."""
    limit = threshold / 100
    _results_folder(results)
    with open_index(results) as ix:
        stored = [RowKey(w, m) for m, w in ix.series_keys()]
        if metrics:
            _known_metrics(metrics, {k.metric for k in stored})
        rows = name_rows(workloads, stored, where="--workload", listed=metrics or
                         default_metrics(ix)) if workloads and stored else None
        series = build_series(ix, metrics, None if rows else workloads, labels, rows=rows)
        problems = ix.run_errors() + ix.problems()
        runs = ix.runs()
    out = Output()
    if window is not None:  # scripts written for the lookback detector keep working
        out.stderr.append("warning: --window is no longer used: each step is judged with "
                          "the runs' own rounds and the spread between runs")
    out.warn(problems)
    verdict = check_history(series, threshold=limit)
    if out_path is not None:
        summary = plot_history(series, out_path, x=x, threshold=limit)  # type: ignore[arg-type]
        out.stderr.append(f"wrote {summary.path}")
    if otava is not None:
        out.stderr.append(f"wrote {write_otava(series, otava)} and {len(series)} CSV file(s)")
    if html is not None:
        page = write_site(series, html, runs=runs, check=verdict, threshold=limit,
                          results=results)
        out.stderr.append(f"wrote {page}")
    if check:
        out.stdout, out.code = format_check(verdict, results), 1 if verdict.failed else 0
    elif out_path is None and html is None and otava is None:
        out.stdout = format_series(series)
    return out


def _results_folder(results: Path) -> None:
    """A results folder that is not there is an error, not an empty list."""
    if not results.is_dir():
        raise StoreError(f"no results folder {results}", where="--results",
                         hint="give the folder abbench run wrote (results/ by default, or "
                              "the arms file's results:), or run a campaign first")


def _known_metrics(asked: list[str], stored: set[str]) -> None:
    """Refuse a --metric no stored run has, listing those that are stored."""
    unknown = [m for m in asked if m not in stored]
    if unknown and stored:
        near = difflib.get_close_matches(unknown[0], sorted(stored), n=1)
        mean = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigError(f"no stored run has the metric {unknown[0]!r}{mean}",
                          where="--metric", hint="stored metrics: " + ", ".join(sorted(stored)))


def diff(run_ref: str, results: Path, *, set_name: str, arms: list[str], prompt: str | None,
         round_: int | None, warm: bool, width: int) -> Output:
    """``abbench diff``: two arms' differing greedy outputs side by side."""
    run_ = open_run(run_ref, results)
    return Output(diff_text(run_.records(), run_.info(), set_name=set_name, arms=arms,
                            prompt=prompt, pass_="warm" if warm else "cold", round_=round_,
                            width=width))


def cancel(ref: str, results: Path) -> Output:
    """``abbench cancel``: stop every Slurm job of a campaign."""
    folder = find_campaign(ref, results)
    if folder is None:
        raise ConfigError(f"{ref} is not a campaign (no campaign.json)", where=ref,
                          hint="give a campaign folder or id (abbench ls lists them); an "
                               "ordinary run stops with Ctrl-C")
    jobs = cancel_campaign(folder)
    return Output(f"cancelled Slurm job(s) {', '.join(jobs)} of {folder}; "
                  f"`abbench run --resume {folder}` gathers what the shards measured and "
                  "runs the rounds left\n")


def build(arms_file: Path, *, jobs: int | None, live: Callable[[str], None]) -> Output:
    """``abbench build``: build (or find in the cache) every git arm of an arms file;
    ``live`` gets what it does and each build's log lines as they are written (a build
    of llama.cpp takes minutes)."""
    out = Output()
    cfg = pin(load_config(arms_file))
    _, built = build_arms(cfg, jobs=jobs, log=live, echo=lambda line: live(f"  | {line}"))
    rows = [f"{name}: {b.source} {b.ref[:12]} -> {'cache hit' if b.cached else 'built'} in "
            f"{b.seconds:.1f} s, {b.dir}" for name, b in built.items()]
    out.stdout = "\n".join(rows) + "\n" if rows else "no git arms: nothing to build\n"
    return out


def builds_ls() -> Output:
    """``abbench builds ls``: the build cache, most recently used first."""
    return Output(render_builds(list_builds()) + "\n")


def builds_gc(*, keep_days: float | None, max_gib: float | None, dry_run: bool) -> Output:
    """``abbench builds gc``: remove failed builds, and old ones beyond the limits."""
    removed = gc(keep_days=keep_days, dry_run=dry_run,
                 max_bytes=None if max_gib is None else int(max_gib * 1024 ** 3))
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb} {e.path} ({e.size_bytes / 1024 ** 2:.1f} MiB)" for e in removed]
    return Output("\n".join([*lines, f"{verb} {len(removed)} build(s)"]) + "\n")


def bisect(arms_file: Path, *, good: str, bad: str, row: str, metric: str | None,
           max_steps: int | None, results: Path | None, live: bool | None,
           until_ci: str | None) -> Output:
    """``abbench bisect``: the commit between --good and --bad that moved a row."""
    res = run_bisect(arms_file, good=good, bad=bad, row=row, metric=metric,
                     max_steps=max_steps, results=results, progress=make_progress(live),
                     until_ci=until_ci)
    return Output(res.text, [], res.code)


def trace_make(*, kind: str, out: Path, seed: int, params: dict[str, float]) -> Output:
    """``abbench trace make``: a seeded trace written, its statistics printed."""
    rows = make_trace(kind, out, seed, params)
    return Output(render_stats(f"wrote {out} ({kind}, seed {seed})", rows))


def trace_stats_of(*, kind: str, path: Path, block_tokens: int) -> Output:
    """``abbench trace stats``: what a trace file is (lengths, rate, designed reuse)."""
    return Output(render_stats(f"{path} ({kind}, {block_tokens}-token blocks)",
                               trace_stats(kind, path, block_tokens)))
