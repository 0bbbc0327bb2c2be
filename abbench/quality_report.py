"""What the quality checks and fingerprints found, for the report and ``abbench diff``.

``summarize(records, arms, baseline)`` computes (pure); ``render_section`` renders
the markdown under the table; ``render_score_cell`` renders a P/T row's cell;
``diff_text`` renders two arms' differing outputs side by side.

Arms are compared prompt by prompt on their most common cold output over the
rounds (ties: the earliest round), so that one odd cold start shows up in the
stability column and not as a cross-arm difference.
"""

from __future__ import annotations

import statistics
import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from abbench import quality  # noqa: F401 - registers the quality metrics for the table
from abbench.errors import ConfigError

if TYPE_CHECKING:
    from abbench.report import Row, Table

MAX_LISTED = 3  # differing prompts named per arm in the report


# ------------------------------------------------------------------ divergence


def char_divergence(a: str, b: str) -> int | None:
    """Index of the first character where ``a`` and ``b`` differ; None when equal."""
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def token_divergence(a: list[Any], b: list[Any]) -> int | None:
    """Index of the first token that differs; None when the lists are equal or empty."""
    if not a or not b or a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


@dataclass(frozen=True)
class Output:
    id: str
    index: int
    round: int
    text: str | None
    tokens: list[Any]
    prompt: str | None = None


@dataclass(frozen=True)
class PromptDiff:
    id: str
    a: Output
    b: Output
    char: int
    token: int | None

    def where(self) -> str:
        tok = f"token {self.token}, " if self.token is not None else ""
        return f"{tok}char {self.char}"


@dataclass
class SetComparison:
    """One arm against the baseline on one prompt set (cold, most common outputs)."""

    arm: str
    compared: int
    diffs: list[PromptDiff]


@dataclass
class SetSummary:
    name: str
    prompts: int
    max_tokens: int | None
    #: arm -> pass -> round -> fingerprint (None: a request failed)
    fingerprints: dict[str, dict[str, dict[int, str | None]]]
    comparisons: list[SetComparison] = field(default_factory=list)


@dataclass(frozen=True)
class ItemTest:
    """One arm against the baseline on one quality suite, item by item: each item's
    verdict is its majority over the rounds (greedy outputs rarely change between
    rounds, so rounds are not independent evidence), and the items whose verdicts
    differ go to an exact McNemar test (binomial on the discordant items)."""

    arm: str
    suite: str
    items: int  # items with a verdict in both arms
    lost: int  # passed on the baseline, failed on the arm
    gained: int
    p: float
    alpha: float = 0.05

    def reading(self) -> str:
        if self.p < self.alpha:
            return "quality lost" if self.lost > self.gained else "quality gained"
        if not self.lost and not self.gained:
            return "same verdict on every item"
        return "no significant change"


def item_tests(records: list[dict[str, Any]], arms: list[str], baseline: str, *,
               alpha: float = 0.05) -> list[ItemTest]:
    from scipy.stats import binomtest

    votes: dict[tuple[str, str], dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("type") == "quality_item" and isinstance(r.get("passed"), bool):
            votes[(r["arm"], r.get("suite", "?"))][str(r["id"])].append(r["passed"])

    def majority(v: dict[str, list[bool]]) -> dict[str, bool]:
        return {k: 2 * sum(x) > len(x) for k, x in v.items()}

    out = []
    for suite in sorted({s for _, s in votes}):
        if (baseline, suite) not in votes:
            continue
        base = majority(votes[(baseline, suite)])
        for arm in arms:
            if arm == baseline or (arm, suite) not in votes:
                continue
            mine = majority(votes[(arm, suite)])
            common = set(base) & set(mine)
            lost = sum(1 for k in common if base[k] and not mine[k])
            gained = sum(1 for k in common if mine[k] and not base[k])
            p = binomtest(min(lost, gained), lost + gained, 0.5).pvalue if lost + gained else 1.0
            out.append(ItemTest(arm, suite, len(common), lost, gained, float(p), alpha))
    return out


@dataclass
class QualitySummary:
    sets: list[SetSummary]
    #: (arm, suite, item id) -> failing item records, by round
    failed_items: dict[tuple[str, str, str], list[dict[str, Any]]]
    command_failures: list[dict[str, Any]]
    command_outputs: list[str]
    item_tests: list[ItemTest] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.sets or self.failed_items or self.command_failures
                    or self.item_tests)


def _outputs(records: list[dict[str, Any]], set_name: str, pass_: str
             ) -> dict[str, dict[int, dict[str, Output]]]:
    """arm -> round -> prompt id -> output."""
    out: dict[str, dict[int, dict[str, Output]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        if r.get("type") == "fingerprint_output" and r.get("set") == set_name \
                and r.get("pass") == pass_:
            out[r["arm"]][int(r["round"])][str(r["id"])] = Output(
                str(r["id"]), int(r.get("index", 0)), int(r["round"]), r.get("text"),
                list(r.get("tokens") or []), r.get("prompt"))
    return out


def typical_outputs(by_round: dict[int, dict[str, Output]]) -> dict[str, Output]:
    """Per prompt, the most common output over the rounds (ties: the earliest round)."""
    by_id: dict[str, list[Output]] = defaultdict(list)
    for r in sorted(by_round):
        for pid, o in by_round[r].items():
            if o.text is not None:
                by_id[pid].append(o)
    out = {}
    for pid, outs in by_id.items():
        counts = Counter(o.text for o in outs)
        best = max(counts.values())
        out[pid] = next(o for o in outs if counts[o.text] == best)
    return out


def compare_outputs(a: dict[str, Output], b: dict[str, Output]) -> tuple[int, list[PromptDiff]]:
    """Prompts compared (present in both) and those whose outputs differ, in prompt order."""
    common = sorted(set(a) & set(b), key=lambda pid: a[pid].index)
    diffs = []
    for pid in common:
        ta, tb = a[pid].text or "", b[pid].text or ""
        c = char_divergence(ta, tb)
        if c is not None:
            diffs.append(PromptDiff(pid, a[pid], b[pid], c,
                                    token_divergence(a[pid].tokens, b[pid].tokens)))
    return len(common), diffs


def summarize(records: list[dict[str, Any]], arms: list[str], baseline: str, *,
              alpha: float = 0.05) -> QualitySummary:
    sets: dict[str, SetSummary] = {}
    for r in records:
        if r.get("type") != "fingerprint":
            continue
        s = sets.setdefault(r["set"], SetSummary(r["set"], int(r.get("prompts") or 0),
                                                 r.get("max_tokens"), {}))
        s.fingerprints.setdefault(r["arm"], {}).setdefault(r["pass"], {})[int(r["round"])] = \
            r.get("fingerprint")
    for s in sets.values():
        cold = _outputs(records, s.name, "cold")
        if baseline not in cold:
            continue
        base = typical_outputs(cold[baseline])
        for arm in arms:
            if arm != baseline and arm in cold:
                n, diffs = compare_outputs(base, typical_outputs(cold[arm]))
                s.comparisons.append(SetComparison(arm, n, diffs))
    failed: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("type") == "quality_item" and not r.get("passed"):
            failed[(r["arm"], r.get("suite", "?"), str(r["id"]))].append(r)
    commands = [r for r in records if r.get("type") == "quality_command"]
    return QualitySummary(list(sets.values()), dict(failed),
                          [r for r in commands if r.get("error")],
                          sorted({r["stdout"] for r in commands if r.get("stdout")}),
                          item_tests(records, arms, baseline, alpha=alpha))


# ------------------------------------------------------------------- rendering


def _short(text: str | None, n: int = 100) -> str:
    if text is None:
        return "(no output)"
    t = text.replace("\n", "↵")
    return repr(t if len(t) <= n else t[: n - 1] + "…")


def stability(by_round: dict[int, str | None], what: str = "cold starts") -> str:
    """"stable in k of k cold starts", or which rounds gave another fingerprint."""
    k = len(by_round)
    got = [fp for fp in by_round.values() if fp is not None]
    failed = [r for r, fp in by_round.items() if fp is None]
    if not got:
        return f"no fingerprint (requests failed in {k} of {k} {what})"
    common, n = Counter(got).most_common(1)[0]
    other = sorted(r for r, fp in by_round.items() if fp is not None and fp != common)
    parts = []
    if not other:
        parts.append(f"stable in {n} of {len(got)} {what}")
    else:
        rounds = ", ".join(f"round {r} (`{by_round[r]}`)" for r in other)
        parts.append(f"differed in {len(other)} of {len(got)} {what}: {rounds}")
    if failed:
        parts.append(f"requests failed in round(s) {', '.join(map(str, sorted(failed)))}")
    return "; ".join(parts)


def _modal(by_round: dict[int, str | None]) -> str | None:
    got = [fp for _, fp in sorted(by_round.items()) if fp is not None]
    return Counter(got).most_common(1)[0][0] if got else None


def render_section(table: Table) -> list[str]:
    """Markdown lines under the table: fingerprints, stability, differences, failures."""
    from abbench.report import md_escape

    q: QualitySummary | None = getattr(table, "quality", None)
    if q is None or q.empty:
        return []
    label = {a: md_escape(table.labels.get(a, a)) for a in table.arms}
    lines: list[str] = []
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
                                                              kv[1][0].get("index", 0))):
            first = recs[0]
            rounds = ", ".join(str(r["round"]) for r in recs)
            lines.append(f"- {label.get(arm, md_escape(arm))}, `{md_escape(suite)}/"
                         f"{md_escape(item)}` (round {rounds}): "
                         f"{md_escape(first.get('verdict') or 'fail')}; output "
                         f"{md_escape(_short(first.get('output')))}")
        lines += ["", "</details>"]
    for r in q.command_failures:
        stderr = md_escape(r.get("stderr") or "")
        lines.append(f"Quality command failed: arm {md_escape(r['arm'])}, round {r['round']}: "
                     f"{md_escape(r.get('error') or '?')} (stderr: {stderr}).")
    if q.command_outputs:
        lines.append(f"Quality command output kept in `{q.command_outputs[0].split('/')[0]}/` "
                     "of the run folder.")
    return lines


def score_rows(rows: list[Row], values: dict[tuple[str, str], dict[str, dict[int, float]]],
               baseline: str) -> None:
    """Give P/T rows their totals (per arm and round) and the baseline they compare to."""
    for row in rows:
        if row.spec.denominator:
            row.totals = values.get((row.workload, row.spec.denominator), {})
            row.baseline = baseline


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
                          "rounds": [r["round"] for r in recs],
                          "verdict": recs[0].get("verdict"), "output": recs[0].get("output")}
                         for (arm, suite, item), recs in q.failed_items.items()],
        "command_failures": [{"arm": r["arm"], "round": r["round"], "error": r.get("error")}
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


def diff_text(records: list[dict[str, Any]], meta: dict[str, Any], *, set_name: str,
              arms: list[str], prompt: str | None = None, pass_: str = "cold",
              round_: int | None = None, width: int = 48) -> str:
    """Two arms' outputs for one prompt set, the differing ones side by side with the
    divergence point marked ``⟦``."""
    if len(arms) != 2:
        raise ConfigError("give exactly two arms", hint="--arm A --arm B")
    known = [a["name"] for a in meta["arms"]]
    for a in arms:
        if a not in known:
            raise ConfigError(f"no arm {a!r} in run {meta['id']}", hint=f"arms: "
                              f"{', '.join(known)}")
    outs = _outputs(records, set_name, pass_)
    if not outs:
        sets = sorted({r["set"] for r in records if r.get("type") == "fingerprint"})
        raise ConfigError(f"no {pass_} outputs of prompt set {set_name!r} in run {meta['id']}",
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
