"""The quality section as text: under the table, a P/T row's cell, report.json's
quality block, and ``abbench diff``'s side-by-side outputs."""

from __future__ import annotations

import statistics
import textwrap
from typing import Any

from abbench.errors import ConfigError
from abbench.model.records import FingerprintRecord, Record
from abbench.model.runmeta import MetaLike, as_meta
from abbench.report.quality_summary import (
    MAX_LISTED,
    QualitySummary,
    _modal,
    _outputs,
    _short,
    compare_outputs,
    stability,
    typical_outputs,
)
from abbench.report.tablemodel import Row, Table
from abbench.report.text import md_escape


def render_section(table: Table) -> list[str]:
    """Markdown lines under the table: fingerprints, stability, differences, failures."""
    q: QualitySummary | None = getattr(table, "quality", None)
    if q is None or q.empty:
        return []
    label = {a: md_escape(table.labels.get(a, a)) for a in table.arms}
    lines: list[str] = fingerprint_summary(table, q)
    for s in q.sets:
        toks = f", {s.max_tokens} tokens each" if s.max_tokens else ""
        lines += ["", f"Greedy outputs, prompt set `{md_escape(s.name)}` ({s.prompts} prompts"
                  f"{toks}; cold = the first requests after each start):", "",
                  "| arm | fingerprint | cold starts | against the baseline |",
                  "|---|---|---|---|"]
        comps = {c.arm: c for c in s.comparisons}
        for arm in table.arms:
            passes = s.fingerprints.get(arm)
            if not passes or "cold" not in passes:
                continue
            cold = passes["cold"]
            fp = _modal(cold)
            stab = stability(cold)
            if "warm" in passes:
                warm = passes["warm"]
                same = sum(1 for r, w in warm.items() if w is not None and w == cold.get(r))
                stab += f"; warm pass same as cold in {same} of {len(warm)} rounds"
            if arm == table.baseline:
                vs = "baseline"
            elif arm in comps:
                c = comps[arm]
                vs = f"{len(c.diffs)} of {c.compared} prompts differ"
                if c.diffs:
                    named = ", ".join(f"{md_escape(d.id)} ({d.where()})"
                                      for d in c.diffs[:MAX_LISTED])
                    more = ", …" if len(c.diffs) > MAX_LISTED else ""
                    vs += f": {named}{more}"
            else:
                vs = "no cold outputs to compare"
            lines.append(f"| {label[arm]} | `{fp or 'none'}` | {stab} | {vs} |")
    if any(c.diffs for s in q.sets for c in s.comparisons):
        lines += ["", f"Positions are where the outputs start to differ; `abbench diff "
                  f"{table.run_id} --set NAME --arm A --arm B` shows them side by side."]
    if q.item_tests:
        lines += ["", "Quality items against the baseline (each item's majority verdict over "
                  "the rounds; exact McNemar test on the items whose verdicts differ):", "",
                  "| arm | suite | items | lost | gained | p | reading |",
                  "|---|---|---|---|---|---|---|"]
        for t in q.item_tests:
            lines.append(f"| {label.get(t.arm, md_escape(t.arm))} | {md_escape(t.suite)} | "
                         f"{t.items} | {t.lost} | {t.gained} | {t.p:.3g} | {t.reading()} |")
    if q.failed_items:
        lines += ["", f"<details><summary>Failed quality items ({len(q.failed_items)}): "
                  "the output that failed, from the first failing round</summary>", ""]
        for (arm, suite, item), recs in sorted(q.failed_items.items(),
                                              key=lambda kv: (table.arms.index(kv[0][0])
                                                              if kv[0][0] in table.arms else 99,
                                                              kv[1][0].index)):
            first = recs[0]
            rounds = ", ".join(str(r.round) for r in recs)
            lines.append(f"- {label.get(arm, md_escape(arm))}, `{md_escape(suite)}/"
                         f"{md_escape(item)}` (round {rounds}): "
                         f"{md_escape(first.verdict or 'fail')}; output "
                         f"{md_escape(_short(first.output))}")
        lines += ["", "</details>"]
    for r in q.command_failures:
        stderr = md_escape(r.stderr or "")
        lines.append(f"Quality command failed: arm {md_escape(r.arm)}, round {r.round}: "
                     f"{md_escape(r.error or '?')} (stderr: {stderr}).")
    if q.command_outputs:
        lines.append(f"Quality command output kept in `{q.command_outputs[0].split('/')[0]}/` "
                     "of the run folder.")
    return lines


def fingerprint_summary(table: Table, q: QualitySummary) -> list[str]:
    """One line per arm above the per-set tables, as people write it in a PR: "New
    cold fingerprints: code 1aada00bdb67844d, ctx ...", "47 of 60 cold nonce prompts
    differ". An arm's fingerprint of a set is its most common cold one."""
    with_cold = {a for s in q.sets for a, p in s.fingerprints.items() if "cold" in p}
    if len(with_cold & set(table.arms)) < 2:  # nothing to set side by side
        return []
    lines = ["", "Cold fingerprints (the first requests after each start), per arm:", ""]
    base = {s.name: _modal(s.fingerprints.get(table.baseline, {}).get("cold", {}))
            for s in q.sets}
    for arm in table.arms:
        fps = {s.name: _modal(s.fingerprints[arm]["cold"]) for s in q.sets
               if "cold" in s.fingerprints.get(arm, {})}
        if not fps:
            continue
        name = md_escape(table.labels.get(arm, arm))
        got = {k: v for k, v in fps.items() if v is not None}
        failed = [md_escape(k) for k, v in fps.items() if v is None]
        parts = []
        if arm == table.baseline:
            name += " (baseline)"
            if got:
                parts.append("Cold fingerprints: " + ", ".join(
                    f"{md_escape(k)} {v}" for k, v in got.items()) + ".")
        else:
            new = {k: v for k, v in got.items() if v != base.get(k)}
            same = [md_escape(k) for k in got if k not in new]
            if new:
                parts.append("New cold fingerprints: " + ", ".join(
                    f"{md_escape(k)} {v}" for k, v in new.items()) + ".")
            if same:
                parts.append(("As the baseline's: " if new else
                              "Cold fingerprints as the baseline's: ") + ", ".join(same) + ".")
            counts = [f"{len(c.diffs)} of {c.compared} cold {md_escape(s.name)} prompts differ"
                      for s in q.sets for c in s.comparisons if c.arm == arm]
            if counts:
                parts.append(", ".join(counts) + ".")
        if failed:
            parts.append("No cold fingerprint (a request failed): " + ", ".join(failed) + ".")
        lines.append(f"- **{name}**: " + " ".join(parts))
    return lines


def _pt(p: float, t: float | None) -> str:
    ps = f"{p:g}" if p == int(p) else f"{p:.1f}"
    return f"{ps}/{t:g}" if t is not None else ps


def render_score_cell(row: Row, arm: str) -> str:
    """``14/15``, or per round ``14/15 / 13/15``, with the change in passed items."""
    cell = row.cells.get(arm)
    if cell is None:
        return "no data"
    totals = (row.totals or {}).get(arm, {})
    vals = [_pt(v, totals.get(r)) for r, v in zip(cell.rounds, cell.values, strict=True)]
    if len(set(vals)) == 1:
        text = vals[0]
    elif len(vals) <= 3:
        text = " / ".join(vals)
    else:
        t = {totals.get(r) for r in cell.rounds}
        tt = f"/{next(iter(t)):g}" if len(t) == 1 and None not in t else ""
        text = f"{min(cell.values):g}-{max(cell.values):g}{tt}"
    base = row.cells.get(row.baseline or "")
    if base is not None and arm != row.baseline:
        d = statistics.fmean(cell.values) - statistics.fmean(base.values)
        ds = f"{d:+g}" if d == int(d) else f"{d:+.1f}"
        text += " (±0)" if d == 0 else f" ({ds} passed)"
    return text


def to_json(q: QualitySummary | None) -> dict[str, Any] | None:
    """The summary for report.json: fingerprints, stability inputs, differing prompts."""
    if q is None or q.empty:
        return None
    return {
        "sets": [{"name": s.name, "prompts": s.prompts, "max_tokens": s.max_tokens,
                  "fingerprints": s.fingerprints,
                  "against_baseline": [
                      {"arm": c.arm, "compared": c.compared, "differ": len(c.diffs),
                       "prompts": [{"id": d.id, "char": d.char, "token": d.token}
                                   for d in c.diffs]} for c in s.comparisons]}
                 for s in q.sets],
        "failed_items": [{"arm": arm, "suite": suite, "id": item,
                          "rounds": [r.round for r in recs],
                          "verdict": recs[0].verdict, "output": recs[0].output}
                         for (arm, suite, item), recs in q.failed_items.items()],
        "command_failures": [{"arm": r.arm, "round": r.round, "error": r.error}
                             for r in q.command_failures],
        "item_tests": [{"arm": t.arm, "suite": t.suite, "items": t.items, "lost": t.lost,
                        "gained": t.gained, "p": t.p, "alpha": t.alpha, "test": "exact McNemar",
                        "reading": t.reading()} for t in q.item_tests],
    }


# ------------------------------------------------------------------------ diff


def _mark(text: str, at: int) -> str:
    t = text[:at] + "⟦" + text[at:]
    return t.replace("\n", "↵")


def side_by_side(a: str, b: str, head_a: str, head_b: str, width: int = 48) -> list[str]:
    wa = textwrap.wrap(a, width, replace_whitespace=False, drop_whitespace=False) or [""]
    wb = textwrap.wrap(b, width, replace_whitespace=False, drop_whitespace=False) or [""]
    out = [f"{head_a[:width]:<{width}} | {head_b[:width]}", f"{'-' * width}-+-{'-' * width}"]
    for i in range(max(len(wa), len(wb))):
        la = wa[i] if i < len(wa) else ""
        lb = wb[i] if i < len(wb) else ""
        out.append(f"{la:<{width}} | {lb}")
    return out


def diff_text(records: list[Record], meta: MetaLike, *, set_name: str,
              arms: list[str], prompt: str | None = None, pass_: str = "cold",
              round_: int | None = None, width: int = 48) -> str:
    """Two arms' outputs for one prompt set, the differing ones side by side with the
    divergence point marked ``⟦``."""
    if len(arms) != 2:
        raise ConfigError("give exactly two arms", hint="--arm A --arm B")
    meta = as_meta(meta)
    known = meta.arm_names
    for a in arms:
        if a not in known:
            raise ConfigError(f"no arm {a!r} in run {meta.id}", hint=f"arms: "
                              f"{', '.join(known)}")
    outs = _outputs(records, set_name, pass_)
    if not outs:
        sets = sorted({r.set for r in records if isinstance(r, FingerprintRecord)})
        raise ConfigError(f"no {pass_} outputs of prompt set {set_name!r} in run {meta.id}",
                          hint=f"sets: {', '.join(sets)}" if sets else
                          "this run has no fingerprints: add fingerprints: to the arms file")
    picked = []
    for a in arms:
        by_round = outs.get(a, {})
        if round_ is not None:
            if round_ not in by_round:
                raise ConfigError(f"arm {a!r} has no {pass_} outputs in round {round_}",
                                  hint=f"rounds: {', '.join(map(str, sorted(by_round)))}")
            picked.append({pid: o for pid, o in by_round[round_].items() if o.text is not None})
        else:
            picked.append(typical_outputs(by_round))
    n, diffs = compare_outputs(picked[0], picked[1])
    which = f"round {round_}" if round_ is not None else "the most common output per prompt"
    lines = [f"prompt set {set_name}, {pass_} pass, {which}: {arms[0]} against {arms[1]}: "
             f"{len(diffs)} of {n} prompts differ"]
    if prompt is not None:
        if prompt not in picked[0] or prompt not in picked[1]:
            raise ConfigError(f"no prompt {prompt!r} in set {set_name!r} for both arms",
                              hint="ids: " + ", ".join(sorted(picked[0])[:20]))
        diffs = [d for d in diffs if d.id == prompt]
        if not diffs:
            lines.append(f"\n{prompt}: identical outputs:\n  {_short(picked[0][prompt].text, 400)}")
    for d in diffs:
        lines += ["", f"{d.id}: diverges at {d.where()} (marked ⟦)"]
        if d.a.prompt:
            lines.append(f"prompt: {_short(d.a.prompt, 200)}")
        lines += side_by_side(_mark(d.a.text or "", d.char), _mark(d.b.text or "", d.char),
                              arms[0], arms[1], width)
    return "\n".join(lines) + "\n"
