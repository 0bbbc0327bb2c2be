"""What the quality checks and fingerprints found, as data for the report.

``summarize(records, arms, baseline)`` computes (pure); :mod:`.quality_text` renders.

Arms are compared prompt by prompt on their most common cold output over the
rounds (ties: the earliest round), so that one odd cold start shows up in the
stability column and not as a cross-arm difference.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from abbench.model.records import (
    FingerprintOutput,
    FingerprintRecord,
    QualityCommand,
    QualityItemRecord,
    Record,
)
from abbench.stats.mcnemar import mcnemar_p

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


def item_tests(records: list[Record], arms: list[str], baseline: str, *,
               alpha: float = 0.05) -> list[ItemTest]:
    votes: dict[tuple[str, str], dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if isinstance(r, QualityItemRecord) and r.passed is not None:
            votes[(r.arm, r.suite)][str(r.id)].append(r.passed)

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
            p = mcnemar_p(lost, gained)
            out.append(ItemTest(arm, suite, len(common), lost, gained, float(p), alpha))
    return out


@dataclass
class QualitySummary:
    sets: list[SetSummary]
    #: (arm, suite, item id) -> failing item records, by round
    failed_items: dict[tuple[str, str, str], list[QualityItemRecord]]
    command_failures: list[QualityCommand]
    command_outputs: list[str]
    item_tests: list[ItemTest] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.sets or self.failed_items or self.command_failures
                    or self.item_tests)


def _outputs(records: list[Record], set_name: str, pass_: str
             ) -> dict[str, dict[int, dict[str, Output]]]:
    """arm -> round -> prompt id -> output."""
    out: dict[str, dict[int, dict[str, Output]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        if isinstance(r, FingerprintOutput) and r.set == set_name and r.pass_ == pass_:
            out[r.arm][r.round][str(r.id)] = Output(str(r.id), r.index, r.round, r.text,
                                                    list(r.tokens or []), r.prompt)
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


def summarize(records: list[Record], arms: list[str], baseline: str, *,
              alpha: float = 0.05) -> QualitySummary:
    sets: dict[str, SetSummary] = {}
    for r in records:
        if not isinstance(r, FingerprintRecord):
            continue
        s = sets.setdefault(r.set, SetSummary(r.set, r.prompts, r.max_tokens, {}))
        s.fingerprints.setdefault(r.arm, {}).setdefault(r.pass_, {})[r.round] = r.fingerprint
    for s in sets.values():
        cold = _outputs(records, s.name, "cold")
        if baseline not in cold:
            continue
        base = typical_outputs(cold[baseline])
        for arm in arms:
            if arm != baseline and arm in cold:
                n, diffs = compare_outputs(base, typical_outputs(cold[arm]))
                s.comparisons.append(SetComparison(arm, n, diffs))
    failed: dict[tuple[str, str, str], list[QualityItemRecord]] = defaultdict(list)
    for q in records:
        if isinstance(q, QualityItemRecord) and not q.passed:
            failed[(q.arm, q.suite, str(q.id))].append(q)
    commands = [c for c in records if isinstance(c, QualityCommand)]
    return QualitySummary(list(sets.values()), dict(failed),
                          [c for c in commands if c.error],
                          sorted({c.stdout for c in commands if c.stdout}),
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


