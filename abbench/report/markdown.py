"""The markdown report: the table people paste into pull requests, then its legend,
notes, quality section and per-row statistics. The one place the header and notes
(:class:`Note`, data) become words (:data:`WORDS`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from abbench.config.values import format_context
from abbench.model.rows import SERVER_ROW, RowKey
from abbench.report import quality_text
from abbench.report.setup import RunSetup
from abbench.report.summary import ArmSummary, Change, summary_of
from abbench.report.tablemodel import Note, Row, Table
from abbench.report.text import fmt_values, md_escape
from abbench.report.verdicts import (
    also_changed,
    details_lines,
    legend_lines,
    render_comparison,
    rounds_line,
)


def render_cell(row: Row, arm: str) -> str:
    cell = row.cells.get(arm)
    if row.spec.denominator:
        return quality_text.render_score_cell(row, arm)
    if cell is None:
        return "no data"
    text = fmt_values(row.spec, cell.values)
    if cell.comparison is not None:
        text += " " + render_comparison(cell.comparison)
    return text


@dataclass(frozen=True)
class Report:
    """The markdown report in its two parts: ``head``, what ``abbench run`` prints last
    on the terminal and a pull request gets (header, setup, differences, the table, the
    summary line), and ``details``, kept in report.md under it (legend, notes, quality,
    statistics per row); ``warnings``: how many of the details warn (:func:`_warnings`)."""

    head: str
    details: str
    warnings: int

    @property
    def text(self) -> str:
        return self.head + self.details


#: notes that say a part of the plan was not measured or left out (invalid samples
#: count once, as the line that sums them up)
_LEFT_OUT = {"round_left_out", "not_run_yet"}


def _warnings(table: Table) -> int:
    """How many things under the table warn: failed server lives, invalid samples, rounds
    left out, and every note whose words begin with a warning."""
    notes = [n for n in (*table.footer, *table.notes) if n.kind in _LEFT_OUT or any(
        ln.lstrip("*").startswith("Warning") for ln in note_lines(n))]
    return len(table.failed_slots) + bool(table.invalid) + len(notes)


def render_markdown(table: Table) -> str:
    return render_report(table).text


def render_report(table: Table) -> Report:
    lines = [header_text(table), ""]
    if table.setup is not None:
        lines += [*setup_lines(table.setup), ""]
    heads = [md_escape(table.labels[a]) for a in table.arms]
    lines.append("| | " + " | ".join(heads) + " |")
    lines.append("|---|" + "---:|" * len(heads))  # numbers right-aligned
    for row in table.rows:
        cells = [render_cell(row, a) for a in table.arms]
        lines.append(f"| {md_escape(row.label)} | " + " | ".join(cells) + " |")
    lines.append("")
    summary = summary_lines(table)
    if summary:
        lines += [*summary, ""]
    head, lines = lines, []
    extra = also_changed(table)
    if extra:
        lines += [extra, ""]
    lines.extend(legend_lines(table))
    need = rounds_line(table)
    if need:
        lines.append(need)
    if table.invalid:
        parts = ", ".join(f"{md_escape(table.labels[a])}: {n}" for a, n in table.invalid.items())
        lines.append(f"Invalid samples (wrong token count or failed; left out): {parts}.")
    for f in table.failed_slots:
        lines.append(f"Failed: arm {md_escape(f.arm)}, round {f.round}: "
                     f"{md_escape(f.reason or 'unknown')}.")
    for n in table.footer:
        lines.extend(note_lines(n))
    lines.extend(quality_text.render_section(table))
    details = details_lines(table)
    if details:
        lines += ["", "<details><summary>Statistics per row</summary>", "", *details, "",
                  "</details>", ""]  # CommonMark: raw HTML runs on to the next blank line
    for n in table.notes:
        lines.extend(note_lines(n))
    rest = "\n".join(lines).rstrip()
    return Report(head="\n".join(head).rstrip() + "\n",
                  details="\n" + rest + "\n" if rest else "",
                  warnings=_warnings(table))


def setup_lines(s: RunSetup) -> list[str]:
    """The setup line, then each arm's differences from the baseline."""
    st = s.setup
    parts = [p for p in (st.server and f"server {st.server}", st.model and f"model {st.model}",
                         st.machine) if p]
    rounds = f"{st.rounds} round{'s' if st.rounds != 1 else ''}"
    reps = f" x {st.reps} repetitions" if st.reps != 1 else ""
    seed = f", seed {st.seed}" if st.seed is not None and st.order == "interleaved" else ""
    lines = [f"Setup: {md_escape(', '.join(parts))}; {rounds}{reps}, order {st.order}{seed}."]
    if s.diffs:
        lines += ["", f"Differences from the baseline ({md_escape(s.baseline)}):", ""]
        for d in s.diffs:
            what = [f"`{x}`" for x in d.flags] + [f"env `{x}`" for x in d.env]
            what += [f"commit `{d.commit[:12]}`"] if d.commit else []
            lines.append(f"- {md_escape(d.arm)}: {', '.join(what) or 'same start command'}")
    return lines


def _changes(name: str, items: list[Change]) -> str:
    """``decode -35.3% at 32K to -46.2% at 128K ▼``: one metric's changed rows, over
    contexts as their range."""
    marks = "".join(sorted({c.mark for c in items}))
    if len(items) == 1:
        w = items[0].row.workload
        at = f" at {w.removeprefix('decode ')}" if w != SERVER_ROW else ""
        return f"{name} {items[0].change * 100:+.1f}%{at} {marks}"
    first, last = items[0], items[-1]
    return (f"{name} {first.change * 100:+.1f}% at "
            f"{first.row.workload.removeprefix('decode ')} to {last.change * 100:+.1f}% at "
            f"{last.row.workload.removeprefix('decode ')} {marks}")


def _arm_summary(a: ArmSummary, rows: dict[RowKey, Row]) -> str:
    by_metric: dict[str, list[Change]] = {}
    for c in a.changed:
        name = "decode" if c.row.metric == "decode_tok_s" else rows[c.row].spec.label
        by_metric.setdefault(name, []).append(c)
    text = ", ".join(_changes(name, items) for name, items in by_metric.items()) \
        or "no row of the table changed beyond the noise band"
    if a.undecided:
        text += f" (not decided yet: {', '.join(rows[k].label for k in a.undecided)})"
    for g in a.greedy:
        text += f"; greedy outputs ({g.set}): {g.differ} of {g.compared} prompts differ"
    return f"{a.label}: {text}"


def summary_lines(table: Table) -> list[str]:
    """The summary (:func:`abbench.report.summary.summary_of`) as one markdown line
    (``**Summary**: ...``), its rows named by the table's labels."""
    rows = {r.key: r for r in table.rows}
    parts = [_arm_summary(a, rows) for a in summary_of(table)]
    return [f"**Summary** (▲ better, ▼ worse): {md_escape('; '.join(parts))}."] if parts else []


def _tokens(v: list[int]) -> str:
    return ", ".join(format_context(n) for n in v) or "none"


#: how each aspect of two runs' workloads reads (report/compare.py ``_aspects``)
_ASPECTS: dict[str, Callable[[Any], str]] = {
    "contexts": _tokens,
    "decode_tokens": lambda v: ", ".join(str(n) for n in v) or "none",
    "side_calls": lambda v: f"{v} workload{'s' if v != 1 else ''}" if v else "none",
    "workloads": lambda v: ", ".join(f"`{md_escape(n)}`" for n in v) or "none",
}


def _compare_unlike(n: Note, f: dict[str, Any]) -> list[str]:
    """Each difference, one clause: ``contexts 32K, 64K against 255K (`a` against `b`)``."""
    unlike = []
    for d in f["differences"]:
        what = d["what"].replace("_", " ")
        if d["what"] == "settings":
            unlike.append("workload settings (loads, prompts, limits; config.yaml of each "
                          "run has them)")
        else:
            unlike.append(f"{what} {_ASPECTS[d['what']](d['a'])} against "
                          f"{_ASPECTS[d['what']](d['b'])}")
    if f["flags"]:
        unlike.append("start command of the second side: "
                      + ", ".join(f"`{x}`" for x in f["flags"]))
    return ["", f"**Warning: the two sides did not measure the same thing** (`{f['run_a']}` "
            f"against `{f['run_b']}`): " + "; ".join(unlike) + ". Rows measured by one side "
            "only read \"no data\"; a changed row may be the difference in setup."]


def header_text(table: Table) -> str:
    """The lines above the table: what ran (or what is compared), the builds, and a
    campaign's hosts after a blank line."""
    lines: list[str] = []
    for n in table.header:
        if n.kind == "hosts":
            lines.append("")
        lines.extend(note_lines(n))
    return "\n".join(lines)


def note_lines(note: Note) -> list[str]:
    """A note in words: one line, or a block of lines (a details table)."""
    return WORDS[note.kind](note, note.figures)


def note_text(note: Note) -> str:
    return "\n".join(note_lines(note))


def _run(n: Note, f: dict[str, Any]) -> list[str]:
    seed = f", seed {f['seed']}" if f["seed"] is not None and f["order"] == "interleaved" \
        else ""
    return [f"abbench run `{f['run_id']}`: {f['rounds']} rounds x {f['reps']} rep(s), order "
            f"{f['order']}{seed}, on {f['machine'] or 'unknown machine'} ({f['host'] or '?'})"]


def _builds(n: Note, f: dict[str, Any]) -> list[str]:
    """``Builds: prod = llama.cpp c4436572 (base); pr = llama.cpp b6ed0fc9 (slow),
    reverting ea7f3bf3``."""
    parts = []
    for b in f["arms"]:
        text = f"{b['arm']} = {b['source'] or '?'} {b['sha'][:8]}"
        if b["ref"] and not b["sha"].startswith(str(b["ref"])):
            text += f" ({b['ref']})"
        patch = [f"{'reverting' if op == 'revert' else 'with'} {sha[:8]}"
                 for op, sha in b["patch"]]
        parts.append(text + (", " + ", ".join(patch) if patch else ""))
    return ["Builds: " + "; ".join(parts) + "."]


def _hosts(n: Note, f: dict[str, Any]) -> list[str]:
    """``Hosts as blocks, ...: `0-gpu7` 5 rounds (gpu7, 1x NVIDIA H200 (driver ...)), ...``"""
    parts = []
    for h in f["hosts"]:
        rounds = f"{h['rounds']} round{'s' if h['rounds'] != 1 else ''}"
        if h["planned"] is not None and h["planned"] != h["rounds"]:
            rounds += f" of shard {h['shard']}'s {h['planned']}"
        cuda = f", CUDA {h['cuda']}" if h["cuda"] else ""
        parts.append(f"`{md_escape(h['name'])}` {rounds} ({md_escape(h['hostname'])}, "
                     f"{md_escape(str(h['machine'] or '?'))}{cuda})")
    shards = f["shards"] if f["shards"] is not None else "?"
    return [f"Hosts as blocks, {len(f['hosts'])} shard run(s) over {shards} shard(s); rounds "
            "paired within a host: " + "; ".join(parts) + "."]


def _compare(n: Note, f: dict[str, Any]) -> list[str]:
    return [f"abbench compare: run `{f['run_a']}` arm {f['arm_a']} (baseline) against run "
            f"`{f['run_b']}` arm {f['arm_b']}; rounds paired by index "
            f"({min(f['rounds_a'], f['rounds_b'])} pairs of {f['rounds_a']} and "
            f"{f['rounds_b']} rounds)"]


def _timing(n: Note, f: dict[str, Any]) -> list[str]:
    if f["median"] is None:
        return ["Client/server timing agreement: the server sent no timings to check "
                "against."]
    return [f"Client/server timing agreement: median |client/server - 1| = "
            f"{f['median'] * 100:.3f}% over {f['samples']} samples (server = "
            f"{', '.join(f['sources'])})."]


def _overhead(n: Note, f: dict[str, Any]) -> list[str]:
    lag = f["ready_lag_ms"]
    lag_s = f"; readiness noticed within {lag:.0f} ms of the server answering" \
        if lag is not None else ""
    return [f"Harness overhead: {f['share'] * 100:.2f}% of {f['wall_s']:.1f} s wall time "
            f"outside server start-up, requests and quality checks{lag_s}."]


def _drift_table(n: Note, f: dict[str, Any]) -> list[str]:
    rounds = f["rounds"]
    lines = ["| signal | arm | " + " | ".join(f"r{r}" for r in rounds) + " |",
             "|---|---|" + "---|" * len(rounds)]
    for s in f["signals"]:
        head = f"{s['label']} ({s['unit']})" if s["unit"] else s["label"]
        for arm in f["arms"]:
            cells = [f"{v:.1f}" if v is not None else "–" for v in s["means"][arm]]
            lines.append(f"| {head} | {arm} | " + " | ".join(cells) + " |")
    return ["", "<details><summary>Drift signals (mean per server life)</summary>", "",
            *lines, "", "</details>"]


def _round_left_out(n: Note, f: dict[str, Any]) -> list[str]:
    why = "; ".join(f"arm {md_escape(a)} failed: {md_escape(reason)}"
                    for a, reason in f["failed"])
    again = (f" It was run again as round {f['rerun']}." if f["rerun"] is not None else
             " `abbench run --resume` runs it again.")
    return [f"Round {n.round} is left out of the comparison (its pair failed: {why}).{again}"]


def _not_run_yet(n: Note, f: dict[str, Any]) -> list[str]:
    pairs = ", ".join(f"{md_escape(a)}/round {r}" for a, r in f["pairs"])
    more = f" and {f['more']} more" if f["more"] else ""
    return [f"Not run yet (interrupted): {pairs}{more}; `abbench run --resume` finishes them."]


def _sample_invalid(n: Note, f: dict[str, Any]) -> list[str]:
    return [f"Sample {f['status'] or 'invalid'}: arm {md_escape(n.arm or '')}, round "
            f"{n.round}, {md_escape(n.row or '')} rep {f['rep']}: "
            f"{md_escape(f['reason'] or 'no reason')}."]


def _until_ci(n: Note, f: dict[str, Any]) -> list[str]:
    looks = ", ".join(str(x) for x in f["looks"])
    return [f"Rounds: --until-ci {f['target'] * 100:g}% (max {f['max_rounds']} rounds, "
            f"looks after rounds {looks or '–'}); stopped: {f['stopped'] or 'not yet'}."]


def _itl_chunks(n: Note, f: dict[str, Any]) -> list[str]:
    how = " and ".join(sorted("counts the server sent" if c == "reported" else
                              "counts inferred from the total" for c in f["counts"]))
    return [f"Load ITL: in {f['several']} of {f['requests']} requests some chunks carried "
            f"several tokens ({how}); each such chunk's gap was divided evenly over its "
            "tokens."]


def _load_left_out(n: Note, f: dict[str, Any]) -> list[str]:
    top = "; ".join(f"{md_escape(k)} (x{v})" for k, v in f["top"])
    return [f"Load requests left out of the percentiles: {f['left_out']} of {f['requests']} "
            f"failed or had the wrong length ({top}); each counts as a failed request and "
            "never towards goodput."]


def _host_disagrees(n: Note, f: dict[str, Any]) -> list[str]:
    items = [f"{md_escape(c['row'])}, {md_escape(c['arm'])}: {c['change'] * 100:+.1f}% there "
             f"against {c['others_change'] * 100:+.1f}% on the other hosts "
             + (f"({abs(c['z']):.1f} se)" if c["z"] is not None
                else "(every round exact on each host)") for c in f["cells"]]
    return [f"Host `{md_escape(f['host'])}` disagrees with the others: " + "; ".join(items)
            + ". The interval of those cells counts the hosts' spread (random effects); "
            "check that host (clocks, other load, its GPU), or leave it out and compare again."]


def _per_host(n: Note, f: dict[str, Any]) -> list[str]:
    hosts = f["hosts"]
    lines = ["<details><summary>Per host</summary>", "",
             "| row | arm | interval | " + " | ".join(f"`{md_escape(h)}`" for h in hosts)
             + " |", "|---|---|---|" + "---|" * len(hosts)]
    for c in f["cells"]:
        how = "random effects" if c["method"] == "random" else "pooled"
        texts = []
        for name in hosts:
            h = c["hosts"].get(name)
            texts.append("–" if h is None else f"{h['change'] * 100:+.1f}% ({h['n']})"
                         + (" ⚑" if h["flagged"] else ""))
        lines.append(f"| {md_escape(c['row'])} | {md_escape(c['arm'])} | {how} | "
                     + " | ".join(texts) + " |")
    return [*lines, "", "Each host's change over its own rounds (rounds in brackets); ⚑ "
            "flagged: farther from the other hosts than 3 standard errors of a normal (a t "
            "quantile with the within-host degrees of freedom). pooled: the hosts agree and "
            "the interval is the paired t over all rounds; random effects: they differ, and "
            "the interval is over hosts.", "", "</details>"]


def _leave_one_out(n: Note, f: dict[str, Any]) -> list[str]:
    same = [f"{s['set']} {'equal to' if not s['differ'] else 'unlike'} the baseline's "
            f"({s['differ']} of {s['compared']} differ)" for s in f["fingerprints"]]
    commits = ", ".join(x[:8] for x in f["reverted"])
    back, still = f["back"], f["still"]
    return [f"Without {commits} ({f['label']}): "
            + (f"back at the baseline: {', '.join(back)}" if back
               else "no changed row of the candidate moves back to the baseline")
            + (f"; still changed: {', '.join(still)}" if still else "")
            + (f"; greedy fingerprints: {'; '.join(same)}" if same else "") + "."]


#: every note's words, by kind
def _replay(n: Note, f: dict[str, Any]) -> list[str]:
    line = f"Replay {md_escape(n.row or '')}: cache {f['cache']}"
    steady = f.get("steady")
    if steady:
        share = steady.get("share") or [0, 1]
        line += (f"; steady window {share[0]:.0%}-{share[1]:.0%} of the planned send order "
                 f"({steady.get('requests')} requests per replay, "
                 f"{steady.get('left_out')} of ramp-up and drain left out)")
    if f.get("designed") is not None:
        line += f"; designed cache hit rate {f['designed']:.1%}"
    if f.get("measured"):
        line += "; measured " + ", ".join(
            f"{md_escape(a)} {v:.1%}" for a, v in f["measured"].items())
    return [line + "."]


WORDS: dict[str, Callable[[Note, dict[str, Any]], list[str]]] = {
    "acceptance_varies": lambda n, f: [
        f"{md_escape(n.row or '')}, {md_escape(n.arm or '')}: acceptance varies more between "
        f"rounds (sd {f['acceptance_cv'] * 100:.1f}%) than decode speed (sd "
        f"{f['decode_cv'] * 100:.1f}%); decode differences here follow acceptance, not "
        "the kernels."],
    "capacity_plot": lambda n, f: [
        "Capacity plot (per-user against total output tok/s, every level searched): "
        f"[{f['path']}]({f['path']})"],
    "replay": _replay,
    "replay_cache": lambda n, f: [
        f"Warning: {md_escape(n.row or '')} ({md_escape(n.arm or '')}, round {n.round}, "
        f"rep {f['rep']}): {md_escape(f['reason'])}."],
    "exposed": lambda n, f: [
        f"Warning: arm {n.arm}'s server listens on {', '.join(f['addresses'])}, beyond "
        "127.0.0.1: anyone who can reach this host can send it requests (and disturb the "
        "measurement); bind it to {host} (127.0.0.1) unless that is meant."],
    "run": _run,
    "builds": _builds,
    "hosts": _hosts,
    "compare": _compare,
    "timing_agreement": _timing,
    "harness_overhead": _overhead,
    "unavailable": lambda n, f: [f"Unavailable: {f['metric']}: {'; '.join(f['reasons'])}."],
    "counters_missing": lambda n, f: [
        f"Counters missing: arm {n.arm}'s server does not expose "
        f"{', '.join(f['counters'])} (read once per server life)."],
    "metric_source": lambda n, f: [f"Source of {f['metric']}: {'; '.join(f['sources'])}."],
    "cache_flushes": lambda n, f: [
        f"Cache flushes: {f['ok']} of {f['total']} succeeded"
        + (f" (failed: {f['first_failure']})." if f["ok"] < f["total"] else ".")],
    "memory_sampling": lambda n, f: [
        "Memory peaks: sampled every " + ", ".join(f"{p:g}" for p in f["periods_ms"])
        + " ms over the server's whole process tree; spikes shorter than that can be "
        "missed."],
    "drift_between_arms": lambda n, f: [
        f"Warning: {f['label']} differs between arms by {f['gap_pct']:.0f}% "
        f"({f['high_arm']} {f['high']:.1f} vs {f['low_arm']} {f['low']:.1f} {f['unit']})."],
    "drift_across_run": lambda n, f: [
        f"Warning: {f['label']} drifted across the run by {f['change_pct']:.0f}% "
        f"(first round {f['first']:.1f}, last {f['last']:.1f} {f['unit']})."],
    "drift_table": _drift_table,
    "side_calls_one_slot": lambda n, f: [
        f"Warning: arm {n.arm}'s server has one slot (/props total_slots = 1): its side "
        "calls waited for the long decode to end; start it with -np 2 or more to serve "
        "them alongside."],
    "round_left_out": _round_left_out,
    "not_run_yet": _not_run_yet,
    "sample_invalid": _sample_invalid,
    "more_invalid_samples": lambda n, f: [
        f"... and {f['count']} more invalid samples (samples.jsonl has each reason)."],
    "until_ci": _until_ci,
    "load_itl_chunks": _itl_chunks,
    "load_itl_one_token": lambda n, f: [
        "Load ITL: every chunk carried one token; each gap between two chunks is one "
        "inter-token latency."],
    "load_requests_left_out": _load_left_out,
    "load_client_busy": lambda n, f: [
        f"Warning: the load client used up to {f['cpu_share'] * 100:.0f}% of a core "
        f"({md_escape(n.arm or '')}, round {n.round}, {md_escape(n.row or '')}): it may "
        "have limited the load it sent."],
    "load_rate_off": lambda n, f: [
        f"Warning: {md_escape(n.row or '')} ({md_escape(n.arm or '')}, round {n.round}) sent "
        f"{f['sent_req_s']:.2f} req/s against {f['rate']:g} asked for."],
    "hosts_mixed": lambda n, f: [
        "Warning: the hosts differ (" + "; ".join(md_escape(m) for m in f["differences"])
        + "); they were pooled because mixed hosts were allowed: the interval is over "
        "hosts that need not share one ratio."],
    "host_disagrees": _host_disagrees,
    "per_host": _per_host,
    "leave_one_out": _leave_one_out,
    "sweep_plot": lambda n, f: [
        "Sweep plot (throughput against TTFT p99 and ITL p50 per level, paired "
        f"intervals): [{f['path']}]({f['path']})"],
    "compare_unlike": _compare_unlike,
    "compare_not_interleaved": lambda n, f: [
        "Warning: these arms ran in different runs, not interleaved: drift between the "
        "runs (machine load, clocks, temperature, software) counts as a difference. Trust "
        "an interleaved run of both arms over this table."],
    "compare_environment_differs": lambda n, f: [
        f"The runs differ in {f['field']}: {f['a']!r} against {f['b']!r}."],
}
