"""Where the noise comes from: inside a server life, or between lives.

A row's values y = ln(value) are modelled as y_ij = mu + b_i + e_ij for rep j of
server life i, with b_i ~ N(0, sigma_b^2) (what a fresh start changes: memory
placement, clocks, the kernel picked) and e_ij ~ N(0, sigma_w^2) (rep to rep
inside one life). The one-way random-effects ANOVA estimates both from the mean
squares (Searle, Casella & McCulloch, *Variance Components*, ch. 3):

    MS_w = sum_ij (y_ij - ybar_i)^2 / (N - a)
    MS_b = sum_i n_i (ybar_i - ybar)^2 / (a - 1)
    sigma_w^2 = MS_w,   sigma_b^2 = max(0, MS_b - MS_w) / n0,

with n0 = (N - sum n_i^2 / N) / (a - 1) (= reps when every life has the same
number). A round's mean log value then has variance sigma_b^2 + sigma_w^2 / reps,
and the paired log-ratio of two arms twice that: more reps only shrink the second
term, more rounds shrink both. :func:`plan_reps` prices each choice of reps with
the measured time of a server life and of a rep (:func:`life_timing`) and picks
the cheapest. Pure functions: records in, results out; report/noise_floor.py renders.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from abbench.model.records import Record, Sample, SlotRecord, WorkloadSample
from abbench.stats.paired import rounds_needed

#: reps per server life that :func:`plan_reps` considers
MAX_REPS = 8


@dataclass(frozen=True)
class Components:
    """The variance components of ln(value) of one row (one arm, or arms pooled)."""

    #: server lives with at least one value, and values in all
    lives: int
    n: int
    #: the effective reps per life (n0; the reps when every life has as many)
    reps: float
    df_within: int
    df_between: int
    ms_within: float | None
    ms_between: float | None

    @property
    def var_within(self) -> float | None:
        return self.ms_within

    @property
    def var_between(self) -> float | None:
        if self.ms_between is None or self.ms_within is None or self.reps <= 0:
            return None
        return max(0.0, self.ms_between - self.ms_within) / self.reps

    @property
    def sigma_within(self) -> float | None:
        """sd of ln(value) between reps of one server life (~ the relative spread)."""
        v = self.var_within
        return None if v is None else math.sqrt(v)

    @property
    def sigma_between(self) -> float | None:
        """sd of the life means beyond what the within-life spread explains."""
        v = self.var_between
        return None if v is None else math.sqrt(v)

    @property
    def between_share(self) -> float | None:
        """sigma_b^2 / (sigma_b^2 + sigma_w^2): the intraclass correlation."""
        b, w = self.var_between, self.var_within
        if b is None or w is None or b + w <= 0:
            return None
        return b / (b + w)

    def round_var(self, reps: int) -> float | None:
        """Variance of one round's mean ln(value) of one arm with ``reps`` reps."""
        b, w = self.var_between, self.var_within
        if b is None or w is None:
            return None
        return b + w / reps

    def log_ratio_sd(self, reps: int) -> float | None:
        """sd of the per-round ln(arm / baseline) of two arms with these components."""
        v = self.round_var(reps)
        return None if v is None else math.sqrt(2 * v)


def one_way(groups: Iterable[Sequence[float]]) -> Components:
    """The ANOVA of ``groups`` (one list of ln values per server life)."""
    return pooled([list(groups)])


def pooled(arms: Iterable[Iterable[Sequence[float]]]) -> Components:
    """The ANOVA of several arms' lives, each arm about its own mean: the sums of
    squares and degrees of freedom add up (the A/A twins measure the same noise)."""
    ss_w = ss_b = 0.0
    df_w = df_b = 0
    lives = n = 0
    n0_num = 0.0
    for groups in arms:
        gs = [list(g) for g in groups if len(g)]
        if not gs:
            continue
        sizes = [len(g) for g in gs]
        total = sum(sizes)
        means = [statistics.fmean(g) for g in gs]
        grand = sum(m * k for m, k in zip(means, sizes, strict=True)) / total
        ss_w += sum((y - m) ** 2 for g, m in zip(gs, means, strict=True) for y in g)
        ss_b += sum(k * (m - grand) ** 2 for m, k in zip(means, sizes, strict=True))
        df_w += total - len(gs)
        df_b += len(gs) - 1
        n0_num += total - sum(k * k for k in sizes) / total
        lives += len(gs)
        n += total
    ms_w = ss_w / df_w if df_w > 0 else None
    ms_b = ss_b / df_b if df_b > 0 else None
    n0 = n0_num / df_b if df_b > 0 else 0.0
    return Components(lives=lives, n=n, reps=n0, df_within=df_w, df_between=df_b,
                      ms_within=ms_w, ms_between=ms_b)


# ------------------------------------------------------------------ from records

#: (workload, metric) -> arm -> round -> the valid reps' values, in rep order
RepValues = dict[tuple[str, str], dict[str, dict[int, list[float]]]]


def rep_values(records: Iterable[Record]) -> RepValues:
    """Every valid rep's value (records with a ``rep``: a collector's one value per
    life has no within-life spread), by row, arm and round."""
    acc: RepValues = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for rec in records:
        if not isinstance(rec, Sample) or not rec.valid or rec.rep is None:
            continue
        for metric, value in rec.metrics.items():
            if isinstance(value, int | float) and math.isfinite(value) and value > 0:
                acc[(rec.workload, metric)][rec.arm][rec.round].append(float(value))
    return {k: {a: dict(r) for a, r in v.items()} for k, v in acc.items()}


def row_components(by_arm: Mapping[str, Mapping[int, Sequence[float]]]
                   ) -> tuple[dict[str, Components], Components]:
    """Each arm's components of one row, and all arms pooled."""
    logs = {arm: [[math.log(v) for v in vals] for _r, vals in sorted(rounds.items())]
            for arm, rounds in by_arm.items()}
    return {arm: one_way(g) for arm, g in logs.items()}, pooled(logs.values())


@dataclass(frozen=True)
class LifeTiming:
    """How long a server life takes, from the slot and sample records."""

    lives: int
    #: median seconds from the start command to the server stopped
    life_s: float
    #: median seconds of a life outside the measured reps: start, readiness, warm-up,
    #: quality checks and fingerprints, stop
    overhead_s: float
    #: median seconds of one rep, per workload row
    rep_s: dict[str, float]
    #: reps per life the run used
    reps: int

    @property
    def rep_all_s(self) -> float:
        """One rep of every row: what one more rep per life costs."""
        return sum(self.rep_s.values())

    def seconds(self, rounds: int, arms: int, reps: int) -> float:
        return rounds * arms * (self.overhead_s + reps * self.rep_all_s)


def life_timing(records: Iterable[Record]) -> LifeTiming | None:
    """Lives from the ok slot records' t_start/t_end; a rep's time is the gap from its
    sample's start to the next sample's start in the same life (the last one's: its
    time to the last token). None when no life finished."""
    recs = list(records)
    lives = {r.slot: float(r.t_end) - float(r.t_start) for r in recs
             if isinstance(r, SlotRecord) and r.ok and r.slot is not None
             and r.t_start is not None and r.t_end is not None}
    if not lives:
        return None
    by_slot: dict[int, list[Sample]] = defaultdict(list)
    for r in recs:
        if (isinstance(r, Sample) and r.rep is not None and r.t is not None
                and r.slot in lives):
            by_slot[r.slot].append(r)
    per_row: dict[str, list[float]] = defaultdict(list)
    measured: dict[int, float] = {}
    reps = 0
    for slot, samples in by_slot.items():
        samples.sort(key=lambda r: float(r.t or 0))
        total = 0.0
        for k, s in enumerate(samples):
            if k + 1 < len(samples):
                d = float(samples[k + 1].t or 0) - float(s.t or 0)
            elif isinstance(s, WorkloadSample) and s.t_last_s is not None:
                d = float(s.t_last_s)
            else:
                continue
            per_row[s.workload].append(d)
            total += d
            reps = max(reps, (s.rep or 0) + 1)
        measured[slot] = total
    overheads = [life - measured.get(slot, 0.0) for slot, life in lives.items()]
    return LifeTiming(lives=len(lives), life_s=statistics.median(lives.values()),
                      overhead_s=max(0.0, statistics.median(overheads)),
                      rep_s={row: statistics.median(d) for row, d in per_row.items()},
                      reps=reps)


# ------------------------------------------------------------------ reps and rounds


@dataclass(frozen=True)
class RepsPlan:
    """One choice of reps per life: the rounds it needs and what they cost."""

    reps: int
    #: predicted sd of the per-round log-ratio
    sigma: float
    rounds: int | None
    #: rounds x arms x (overhead + reps x time per rep); None without timing or rounds
    seconds: float | None


def plan_reps(comp: Components, *, effect: float, timing: LifeTiming | None, arms: int = 2,
              alpha: float = 0.05, power: float = 0.8, max_reps: int = MAX_REPS
              ) -> list[RepsPlan]:
    """For reps 1..``max_reps``: the rounds that detect ``effect`` (a fraction, e.g.
    0.02) with the paired test, and their time. Empty when the components are unknown."""
    out = []
    delta = math.log1p(effect)
    for r in range(1, max_reps + 1):
        sigma = comp.log_ratio_sd(r)
        if sigma is None:
            return []
        n = rounds_needed(sigma, delta, alpha=alpha, power=power)
        secs = timing.seconds(n, arms, r) if timing is not None and n is not None else None
        out.append(RepsPlan(r, sigma, n, secs))
    return out


def cheapest(plans: Sequence[RepsPlan]) -> RepsPlan | None:
    """The plan with the least time (fewest rounds without timing; ties: fewer reps)."""
    ok = [p for p in plans if p.rounds is not None]
    if not ok:
        return None
    if all(p.seconds is not None for p in ok):
        return min(ok, key=lambda p: (p.seconds, p.reps))
    return min(ok, key=lambda p: (p.rounds, p.reps))


def plan_run(plans: Mapping[str, Sequence[RepsPlan]], *, timing: LifeTiming | None,
             arms: int = 2) -> RepsPlan | None:
    """The cheapest reps for the whole run: every life runs every row, so for each
    reps the row that needs the most rounds decides the rounds."""
    by_reps: dict[int, list[RepsPlan]] = defaultdict(list)
    for ps in plans.values():
        for p in ps:
            by_reps[p.reps].append(p)
    out = []
    for r, ps in sorted(by_reps.items()):
        if len(ps) < len(plans) or any(p.rounds is None for p in ps):
            continue
        worst = max(ps, key=lambda p: p.rounds or 0)
        n = worst.rounds or 0
        out.append(RepsPlan(r, worst.sigma, n,
                            timing.seconds(n, arms, r) if timing is not None else None))
    return cheapest(out)
