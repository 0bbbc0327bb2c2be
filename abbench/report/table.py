"""From stored records to the table people paste into pull requests, as data.

``build_table(records, meta)`` computes (no text but labels); :mod:`.markdown` and
:mod:`.formats` render. A row is one (workload row, metric); a cell is one arm's
per-round values (reps averaged within the round first) with its comparison
against the baseline, paired by round.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from abbench.config.schema import format_context
from abbench.config.stats import StatsConfig, TableConfig
from abbench.errors import ConfigError
from abbench.model.metrics import MetricSpec, catalogue, spec
from abbench.model.records import Record, Sample, SlotRecord, WorkloadSample
from abbench.model.rounds import round_values
from abbench.model.rows import SERVER_ROW, RowKey
from abbench.report import quality
from abbench.report.hosts import flag_notes, hosts_line, mixed_note, per_host_lines
from abbench.report.notes import collector_notes, run_notes, side_call_notes
from abbench.report.setup import RunSetup
from abbench.stats.blocks import compare_blocks, round_hosts
from abbench.stats.paired import Comparison, adjust, compare


@dataclass
class Cell:
    arm: str
    rounds: list[int]
    values: list[float]
    comparison: Comparison | None = None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)


@dataclass
class Row:
    workload: str
    metric: str
    spec: MetricSpec
    cells: dict[str, Cell]
    #: what the row measures (from its samples; a whole-server-life row has no context)
    key: RowKey = field(default_factory=lambda: RowKey(""))
    #: P/T rows (spec.denominator): arm -> round -> total, and the arm compared against
    totals: dict[str, dict[int, float]] | None = None
    baseline: str | None = None

    @property
    def label(self) -> str:
        unit = f" ({self.spec.unit})" if self.spec.unit else ""
        if self.workload == SERVER_ROW:
            return f"{self.spec.label}{unit}"
        if self.metric == "decode_tok_s":
            return f"{self.workload}{unit}"
        return f"{self.workload} {self.spec.label}{unit}"


@dataclass
class Table:
    run_id: str
    arms: list[str]
    labels: dict[str, str]
    baseline: str
    #: the rows the PR table shows, in order (``table:`` in the arms file)
    rows: list[Row]
    header: str
    #: every other row: in the details and report.json, and named under the table
    #: when one of its cells changed
    hidden: list[Row] = field(default_factory=list)
    footer: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failed_slots: list[SlotRecord] = field(default_factory=list)
    invalid: dict[str, int] = field(default_factory=dict)
    quality: quality.QualitySummary | None = None
    #: what was compared (report/setup.py): set where the stored config is at hand
    setup: RunSetup | None = None


def build_table(records: list[Record], meta: dict[str, Any], *,
                baseline: str | None = None, metrics: list[str] | None = None,
                rows: Literal["table", "all"] = "table",
                settings: StatsConfig | None = None) -> Table:
    """Every recorded (row, metric) compared, then split into the rows the table shows
    and the hidden rest. ``metrics``: show exactly these metrics' rows; ``rows="all"``:
    show every row; else the run's ``table:`` setting. ``settings``: how verdicts are
    decided; default the run's stored ``stats``, at the report's alpha of an --until-ci
    run (:func:`abbench.stats.stopping.look_alphas`)."""
    if settings is None:
        settings = StatsConfig.model_validate(meta.get("stats") or {})
        alpha_report = (meta.get("until_ci") or {}).get("alpha_report")
        if alpha_report is not None:
            settings = settings.model_copy(update={"alpha": float(alpha_report)})
    arms = [a["name"] for a in meta["arms"]]
    labels = {a["name"]: a.get("label") or a["name"] for a in meta["arms"]}
    base = baseline or meta.get("baseline") or arms[0]
    if base not in arms:
        raise ConfigError(f"baseline {base!r} is not an arm of run {meta['id']}",
                          hint=f"arms: {', '.join(arms)}")
    arms = [base] + [a for a in arms if a != base]
    known = catalogue(records)  # labels of collectors' metrics of the user's own
    values = round_values(records)
    keys = row_keys(records)
    every: list[Row] = []
    for (workload, metric), by_arm in values.items():
        cells = {arm: Cell(arm, sorted(by_arm[arm]), [by_arm[arm][r] for r in sorted(by_arm[arm])])
                 for arm in arms if arm in by_arm}
        every.append(Row(workload, metric, spec(metric, known), cells,
                         keys.get(workload, RowKey(workload))))
    hosts = round_hosts(records)  # a gathered campaign's rounds, by host
    compare_rows(every, base, settings=settings, hosts=hosts)
    score_rows(every, values, base)
    if metrics is not None:
        shown = [r for r in every if r.metric in metrics]
    elif rows == "all":
        shown = list(every)
    else:
        shown = pick_rows(every, TableConfig.model_validate(meta.get("table") or {}))
    picked = {id(r) for r in shown}

    invalid: dict[str, int] = defaultdict(int)
    for rec in records:
        if isinstance(rec, Sample) and not rec.valid:
            invalid[rec.arm] += 1
    failed = [r for r in records if isinstance(r, SlotRecord) and r.failed]
    table = Table(run_id=meta["id"], arms=arms, labels=labels, baseline=base, rows=shown,
                  hidden=[r for r in every if id(r) not in picked],
                  header="\n".join(x for x in (_header(meta), _builds(meta)) if x),
                  failed_slots=failed, invalid=dict(invalid))
    table.footer = _footer(records, meta)
    table.notes += collector_notes(records)  # unavailable metrics, drift signals
    table.notes += run_notes(meta)  # how --until-ci chose the rounds
    table.notes += side_call_notes(records, meta)
    table.quality = quality.summarize(records, arms, base, alpha=settings.alpha)
    if hosts:
        line = hosts_line(meta)
        table.header += f"\n\n{line}" if line else ""
        refs = [(r.label, labels.get(a, a), c.comparison) for r in shown
                for a, c in r.cells.items() if a != base]
        table.notes += mixed_note(meta) + flag_notes(refs) + per_host_lines(refs)
    table.notes += variant_notes(table, meta)
    return table


def variant_notes(table: Table, meta: dict[str, Any]) -> list[str]:
    """Per leave-one-out arm (a git arm whose patch set reverts commits from another
    arm's), which of the candidate's changed rows move back to the baseline without
    that commit, and whether its greedy fingerprints equal the baseline's."""
    gits = {a["name"]: a["git"] for a in meta.get("arms") or []
            if isinstance(a, dict) and isinstance(a.get("git"), dict)}
    out = []
    for name, g in gits.items():
        reverted = [sha for op, sha in g.get("patch") or [] if op == "revert"]
        cands = [c for c, h in gits.items() if c != name and h.get("sha") == g.get("sha")
                 and len(h.get("patch") or []) < len(g.get("patch") or [])]
        if not reverted or not cands or name == table.baseline:
            continue
        cand = cands[0]
        back: list[str] = []
        still: list[str] = []
        for row in table.rows:
            c = row.cells.get(cand)
            v = row.cells.get(name)
            if c is None or v is None or c.comparison is None or v.comparison is None \
                    or c.comparison.verdict != "changed":
                continue
            (back if v.comparison.verdict == "within_noise" else still).append(row.label)
        same = []
        for s in table.quality.sets if table.quality else []:
            for comp in s.comparisons:
                if comp.arm == name:
                    same.append(f"{s.name} {'equal to' if not comp.diffs else 'unlike'} the "
                                f"baseline's ({len(comp.diffs)} of {comp.compared} differ)")
        label = table.labels.get(name, name)
        commits = ", ".join(str(x)[:8] for x in reverted)
        text = (f"Without {commits} ({label}): "
                + (f"back at the baseline: {', '.join(back)}" if back
                   else "no changed row of the candidate moves back to the baseline")
                + (f"; still changed: {', '.join(still)}" if still else "")
                + (f"; greedy fingerprints: {'; '.join(same)}" if same else "") + ".")
        out.append(text)
    return out


MISSES = "misses_per_token"  # the preferred misses/token source; others are its variants


def _memory_metric(rows: list[Row]) -> str:
    """peak VRAM where any was measured, else the process tree's peak RSS."""
    return "peak_vram_mib" if any(r.metric == "peak_vram_mib" for r in rows) else "peak_rss_mib"


def _same_as(row: Row, other: Row | None) -> bool:
    return other is not None and all(
        c.rounds == o.rounds and c.values == o.values
        for a, c in row.cells.items() for o in [other.cells.get(a)] if o is not None) \
        and row.cells.keys() == other.cells.keys()


def row_keys(records: list[Record]) -> dict[str, RowKey]:
    """Row id -> what it measures, from the workload's own samples."""
    out: dict[str, RowKey] = {}
    for r in records:
        if isinstance(r, WorkloadSample) and r.workload not in out:
            out[r.workload] = r.row_key()
    return out


def _title(row: Row) -> str:
    """The workload a row belongs to, without its context: ``decode + side calls``."""
    if row.key.context is None:
        return row.workload
    return row.workload.replace(f" {format_context(row.key.context)}", "", 1)


def pick_rows(rows: list[Row], cfg: TableConfig) -> list[Row]:
    """The PR table's rows: each family (or metric name) of ``cfg.metrics`` in turn.

    Peak memory shows once per server life, and per workload only where that
    workload's peak differs from the life's; misses/token shows one source
    (``misses_per_token`` first, then the others by name) at each workload's longest
    context, where the cache is under most pressure (the other contexts stay in the
    details and, when changed, under the table)."""
    memory = _memory_metric(rows)
    server = {r.metric: r for r in rows if r.workload == SERVER_ROW}
    source: dict[str, str] = {}  # row id -> its one misses/token source
    longest: dict[str, Row] = {}  # workload title -> its longest-context misses row
    for r in rows:
        if r.metric.startswith(MISSES):
            have = source.get(r.workload)
            if have is None or (r.metric == MISSES or (have != MISSES and r.metric < have)):
                source[r.workload] = r.metric
    for r in rows:
        if source.get(r.workload) == r.metric:
            title = _title(r)
            if title not in longest or (r.key.context or 0) > (longest[title].key.context or 0):
                longest[title] = r
    misses = {id(r) for r in longest.values()}
    named = {"decode_tok_s", "ttft_ms", "prefill_tok_s", "side_call_ms"}

    def family(name: str, r: Row) -> bool:
        if name in named:
            return r.metric == name
        if name == "vram":
            return r.metric == memory and (r.workload == SERVER_ROW
                                           or not _same_as(r, server.get(memory)))
        if name == "misses":
            return id(r) in misses
        if name == "quality":
            return r.spec.denominator is not None
        if name == "other":
            return r.spec.table and r.metric not in named and r.spec.denominator is None \
                and not r.metric.startswith(MISSES) and r.metric not in (
                    "peak_vram_mib", "peak_rss_mib", "device_vram_mib")
        return r.metric == name

    out: list[Row] = []
    taken: set[int] = set()
    for name in cfg.metrics:
        for r in rows:
            if id(r) not in taken and family(name, r):
                out.append(r)
                taken.add(id(r))
    return out


def _header(meta: dict[str, Any]) -> str:
    env = meta.get("environment") or {}
    machine = env.get("gpu_summary") or env.get("cpu") or "unknown machine"
    order = meta.get("order", "?")
    seed = meta.get("seed")
    seed_s = f", seed {seed}" if seed is not None and order == "interleaved" else ""
    rounds = meta.get("rounds_done", meta.get("rounds"))
    reps = meta.get("reps", 1)
    return (f"abbench run `{meta['id']}`: {rounds} rounds x {reps} rep(s), order {order}"
            f"{seed_s}, on {machine} ({env.get('host', '?')})")


def _builds(meta: dict[str, Any]) -> str:
    """``Builds: prod = llama.cpp c4436572 (base); pr = llama.cpp b6ed0fc9 (slow),
    reverting ea7f3bf3``: the commit and patch set each git arm was built from."""
    parts = []
    for a in meta.get("arms") or []:
        g = a.get("git") if isinstance(a, dict) else None
        if not isinstance(g, dict) or not g.get("sha"):
            continue
        text = f"{a['name']} = {g.get('source', '?')} {str(g['sha'])[:8]}"
        if g.get("ref") and not str(g["sha"]).startswith(str(g["ref"])):
            text += f" ({g['ref']})"
        patch = [f"{'reverting' if op == 'revert' else 'with'} {str(sha)[:8]}"
                 for op, sha in (g.get("patch") or []) if isinstance(sha, str)]
        parts.append(text + (", " + ", ".join(patch) if patch else ""))
    return "Builds: " + "; ".join(parts) + "." if parts else ""


def timing_agreement(records: list[Record]) -> tuple[float, int] | None:
    """Median |client decode tok/s / server decode tok/s - 1| over samples."""
    errs = []
    for rec in records:
        if not isinstance(rec, Sample) or not rec.valid:
            continue
        client, server = rec.metrics.get("decode_tok_s"), rec.metrics.get("server_decode_tok_s")
        if client and server:
            errs.append(abs(client / server - 1))
    if not errs:
        return None
    return statistics.median(errs), len(errs)


def timing_sources(records: list[Record]) -> list[str]:
    """Which server field gave the server side of the agreement line."""
    out = []
    for rec in records:
        if not isinstance(rec, Sample) or not rec.metrics.get("server_decode_tok_s"):
            continue
        vllm = isinstance(rec, WorkloadSample) and (rec.server_metrics or {}).get(
            "generation_time_ms") is not None
        src = "vLLM metrics.generation_time_ms" if vllm else \
            "llama.cpp timings.predicted_per_second"
        if src not in out:
            out.append(src)
    return out


def _footer(records: list[Record], meta: dict[str, Any]) -> list[str]:
    out = []
    agree = timing_agreement(records)
    if agree is not None:
        out.append(f"Client/server timing agreement: median |client/server - 1| = "
                   f"{agree[0] * 100:.3f}% over {agree[1]} samples (server = "
                   f"{', '.join(timing_sources(records))}).")
    else:
        out.append("Client/server timing agreement: the server sent no timings to check "
                   "against.")
    wall = meta.get("timing") or {}
    if wall.get("wall_s"):
        share = wall.get("overhead_s", 0.0) / wall["wall_s"]
        lag = wall.get("ready_lag_ms_max")
        lag_s = f"; readiness noticed within {lag:.0f} ms of the server answering" \
            if lag is not None else ""
        out.append(f"Harness overhead: {share * 100:.2f}% of {wall['wall_s']:.1f} s wall time "
                   f"outside server start-up, requests and quality checks{lag_s}.")
    return out


def score_rows(rows: list[Row], values: dict[tuple[str, str], dict[str, dict[int, float]]],
               baseline: str) -> None:
    """Give P/T rows their totals (per arm and round) and the baseline they compare to."""
    for row in rows:
        if row.spec.denominator:
            row.totals = values.get((row.workload, row.spec.denominator), {})
            row.baseline = baseline


def compare_rows(rows: list[Row], baseline: str, *, settings: StatsConfig | None = None,
                 noise_band: float | None = None, alpha: float | None = None,
                 hosts: Mapping[int, str] | None = None) -> None:
    """Compare every non-baseline cell of ``rows`` with the baseline; Benjamini-Hochberg
    across all of them. ``hosts``: round -> host when the rounds ran on several hosts
    (hosts as blocks, :func:`abbench.stats.blocks.compare_blocks`)."""
    s = settings or StatsConfig()
    if noise_band is not None or alpha is not None:
        s = s.model_copy(update={k: v for k, v in (("noise_band", noise_band),
                                                   ("alpha", alpha)) if v is not None})
    cells: list[Cell] = []
    comps: list[Comparison] = []
    for row in rows:
        base = row.cells.get(baseline)
        if base is None:
            continue
        b = dict(zip(base.rounds, base.values, strict=True))
        for arm, cell in row.cells.items():
            if arm == baseline:
                continue
            a = dict(zip(cell.rounds, cell.values, strict=True))
            how: dict[str, Any] = dict(direction=row.spec.direction, alpha=s.alpha,
                                       noise_band=s.band(row.metric), base_name=baseline,
                                       arm_name=arm)
            c = compare_blocks(b, a, hosts, **how) if hosts else compare(b, a, **how)
            cell.comparison = c
            if c is not None:
                cells.append(cell)
                comps.append(c)
    for cell, c in zip(cells, adjust(comps), strict=True):
        cell.comparison = c
