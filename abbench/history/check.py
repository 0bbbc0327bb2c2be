"""``abbench history --check``: the CI gate. Did the newest run's level come through a
step that made a series worse? Said as a person reads it: the change with its
interval and verdict, the run where it began, the last good run, the commit range,
and the ``abbench bisect`` command line that finds the commit."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from abbench.history.series import Point, Series
from abbench.stats import regression
from abbench.stats.regression import ChangePoint

#: the A/B table's words for a verdict
WORDS = {"changed": "changed", "within_noise": "within noise", "inconclusive": "not decided"}


@dataclass(frozen=True)
class Regression:
    """A series whose newest level is worse than the one before it."""

    series: Series
    step: ChangePoint
    began: Point  # the first run at the new level
    last_good: Point  # the last run at the old level

    @property
    def decided(self) -> bool:
        return self.step.verdict == "changed"


@dataclass(frozen=True)
class CheckResult:
    newest: str | None
    threshold: float
    checked: int
    regressions: list[Regression] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(r.decided for r in self.regressions)


def newest_run(series: list[Series]) -> str | None:
    ends = [(p.created_ts or 0.0, p.run_id) for s in series for p in s.points[-1:]]
    return max(ends)[1] if ends else None


def check_history(series: list[Series], *, threshold: float = 0.05) -> CheckResult:
    """Every series the newest run is part of, judged (:func:`regression.change_points`):
    a step into its newest level that is worse by more than ``threshold``."""
    newest = newest_run(series)
    checked = 0
    found = []
    for s in series:
        if not s.points or s.points[-1].run_id != newest:
            continue
        checked += 1
        step = regression.newest_regression(s.change_points, threshold)
        if step is not None:
            found.append(Regression(s, step, s.points[step.start], s.points[step.start - 1]))
    return CheckResult(newest, threshold, checked, found)


def bisect_command(r: Regression, results: Path | None = None) -> str | None:
    """``abbench bisect <the run's arms file> --good A --bad B --row R --metric M``, when
    both ends have a commit."""
    good, bad = r.last_good.commit, r.began.commit
    if not good or not bad or good == bad:
        return None
    arms = (results / r.began.run_id / "config.yaml") if results else Path("arms.yaml")
    return shlex.join(["abbench", "bisect", str(arms), "--good", good, "--bad", bad,
                       "--row", r.series.workload, "--metric", r.series.metric])


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}"


def format_check(result: CheckResult, results: Path | None = None) -> str:
    if result.newest is None:
        return "nothing to check: no stored values for these metrics\n"
    lines = []
    for r in result.regressions:
        st, s = r.step, r.series
        head = "REGRESSION" if r.decided else "NOT DECIDED"
        lines.append(f"{head} {s.title}: {_pct(st.change)}% [{_pct(st.lo)}, {_pct(st.hi)}] "
                     f"({WORDS[st.verdict]}; {s.direction} is better)")
        began = f"began in run {r.began.run_id}"
        if r.began.run_id != result.newest:
            began += f" (the newest run, {result.newest}, is still at that level)"
        lines.append(f"  {began}; last good run {r.last_good.run_id}")
        if r.last_good.commit or r.began.commit:
            lines.append(f"  commits {r.last_good.commit or '?'}..{r.began.commit or '?'}")
        cmd = bisect_command(r, results)
        if cmd:
            lines.append(f"  find the commit: {cmd}")
        if not r.decided:
            lines.append("  run the newest commit again: one or two more runs decide it")
    if not result.failed:
        lines.append(f"OK: run {result.newest} shows no regression beyond "
                     f"{result.threshold * 100:g}% ({result.checked} series checked)")
    return "\n".join(lines) + "\n"
