"""Hosts as blocks: an arm against the baseline when the rounds ran on several hosts.

A campaign sharded over hosts runs whole rounds on each host, so each round's
log-ratio d = ln(arm / baseline) belongs to one host h. Hosts differ in speed (that
cancels in d, both arms ran there) and may differ in the arm *ratio* too: a host
slower for one arm (another GPU clock, a NUMA quirk). The fleet's change is then
the mean over hosts of the per-host change, and the interval must carry the
host-to-host variation of d, not only the round-to-round noise.

The rule, in one-way ANOVA terms (hosts as groups of rounds):

- per host: n_h rounds, mean d_h; the within-host variance s^2 pooled over hosts
  (N - k degrees of freedom for k hosts and N rounds);
- Cochran's Q = sum n_h (d_h - d)^2 / s^2 (= (k - 1) F), and its F test of "every
  host has the same ratio"; the between-host variance tau^2 by DerSimonian-Laird on
  those weights (the ANOVA estimator (MSB - MSW) / n when hosts have n rounds each);
- when the F test finds the hosts to differ (p < :data:`HETEROGENEITY_ALPHA`, 0.01), or
  a host is flagged (below): the
  random-effects mean, weights 1 / (s^2 / n_h + tau^2), its Hartung-Knapp standard
  error (never below the DerSimonian-Laird one), and a t interval with k - 1 degrees
  of freedom: the number of hosts, not of rounds, sets its width;
- else the hosts agree: the paired t interval over all the rounds, exactly the one
  of a single host with as many rounds (:func:`abbench.stats.paired.compare`).

The verdict rule is paired's: "changed" when the p of "beyond the band"
(:func:`~abbench.stats.paired.p_beyond_band_se`, with the interval's df) is below alpha
(and survives Benjamini-Hochberg over the table in :func:`~abbench.stats.families.adjust`),
"within noise" when the 1 - 2 alpha interval lies inside the band, "inconclusive"
otherwise. A host is flagged by name when
|d_h - mean of the others| exceeds :data:`FLAG_SE` standard errors of that difference
(from the within-host variance; as a t quantile with that variance's degrees of
freedom, so that a host that agrees is flagged as rarely as beyond 3 se of a normal,
0.27%, however few rounds each host ran) and half the noise band.
``benchmarks/simulate_hosts.py`` checks false "changed", coverage and power of this
rule against the alternatives (docs/simulation-hosts.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np
from scipy import stats as sps

from abbench.model.records import Record, Sample
from abbench.stats.kinds import Kind
from abbench.stats.paired import (
    Comparison,
    Verdict,
    band_edges,
    compare,
    log_ratios,
    p_beyond_band_se,
    t_interval,
)

#: the F test of "every host has the same ratio" at this level switches to random effects
#: (low, so that hosts that agree keep the one-host interval, and its power, in 99% of
#: campaigns; a host far off is caught by the flag as well: docs/simulation-hosts.md)
HETEROGENEITY_ALPHA = 0.01
#: a host whose mean log-ratio lies this many standard errors from the others' is flagged
#: (normal-equivalent: the t quantile with the within-host df of the same tail, 0.27%)
FLAG_SE = 3.0


def flag_limit(df: int) -> float:
    """How many standard errors flag a host when the within-host variance has ``df``
    degrees of freedom: the t quantile whose two-sided tail is that of FLAG_SE normal se
    (3.0 for many rounds; 4.3 with 8 df, 3.6 with 14)."""
    return float(sps.t.ppf(sps.norm.cdf(FLAG_SE), df))

Method = Literal["pooled", "random"]
#: which interval: ``auto`` (the rule above), or always one of the two (for the study)
Rule = Literal["auto", "pooled", "random", "dl"]


@dataclass(frozen=True)
class HostEstimate:
    """One host's rounds: ``mean`` of d (log scale), its standard error from the
    pooled within-host variance, and how far it lies from the other hosts."""

    host: str
    n: int
    mean: float
    se: float | None
    #: (mean - the others' mean) / the standard error of that difference; the others
    #: are the hosts not flagged
    z: float | None
    flagged: bool

    @property
    def change(self) -> float:
        return math.expm1(self.mean)


@dataclass(frozen=True)
class HostInterval:
    """The fleet's mean log-ratio with its interval (log scale)."""

    method: Method
    mean: float
    se: float
    df: int
    lo: float
    hi: float
    #: t test of mean = 0
    p: float
    tau2: float
    #: Cochran's Q and the F test's p of "every host has the same ratio"
    q: float | None
    heterogeneity_p: float | None
    hosts: tuple[HostEstimate, ...]

    @property
    def flagged(self) -> list[str]:
        return [h.host for h in self.hosts if h.flagged]


def _groups(d: Sequence[float] | np.ndarray, hosts: Sequence[str]) -> dict[str, np.ndarray]:
    out: dict[str, list[float]] = {}
    for x, h in zip(d, hosts, strict=True):
        out.setdefault(h, []).append(float(x))
    return {h: np.asarray(v) for h, v in out.items()}


def _z(x: np.ndarray, others: np.ndarray, s2: float | None) -> tuple[float, float | None]:
    """The host's mean minus the others', and that difference in standard errors."""
    diff = float(x.mean() - others.mean())
    if s2 is None:
        return diff, None
    se_diff = math.sqrt(s2 * (1 / x.size + 1 / others.size))
    if se_diff > 0:
        return diff, diff / se_diff
    return diff, 0.0 if diff == 0 else math.copysign(math.inf, diff)


def _flags(groups: dict[str, np.ndarray], s2: float | None, floor: float, limit: float
           ) -> tuple[HostEstimate, ...]:
    """Each host against the others. Flagged hosts leave "the others" one at a time,
    the farthest first, so that one host far off does not make a normal one look off
    (with two hosts both are named: which one is off, nothing here can tell)."""
    def far(h: str, pool: set[str]) -> tuple[float, float | None]:
        others = np.concatenate([groups[g] for g in groups if g in pool and g != h])
        return _z(groups[h], others, s2)

    flagged: set[str] = set()
    pool = set(groups)
    while s2 is not None and len(pool) >= 2:
        scores = {h: far(h, pool) for h in pool}
        off = {h: (abs(z), abs(diff)) for h, (diff, z) in scores.items()
               if z is not None and abs(z) > limit and abs(diff) > floor}
        if not off:
            break
        if len(pool) == 2:
            flagged |= set(off) | pool
            break
        worst = max(off, key=lambda h: off[h])
        flagged.add(worst)
        pool.discard(worst)
    out = []
    for h, x in groups.items():
        _, z = far(h, pool | {h})
        se = math.sqrt(s2 / x.size) if s2 is not None else None
        out.append(HostEstimate(h, int(x.size), float(x.mean()), se, z, h in flagged))
    return tuple(out)


def host_interval(d: Sequence[float] | np.ndarray, hosts: Sequence[str], *, alpha: float = 0.05,
                  rule: Rule = "auto", flag_floor: float = 0.0,
                  heterogeneity_alpha: float = HETEROGENEITY_ALPHA) -> HostInterval:
    """The interval of the mean log-ratio over hosts (see the module docstring).

    ``rule``: ``auto`` switches to random effects when the F test finds the hosts to
    differ (p < ``heterogeneity_alpha``) or a host is flagged; ``pooled`` and ``random``
    force one interval; ``dl`` switches whenever DerSimonian-Laird's tau^2 is above 0
    (the simulation compares them).
    ``flag_floor``: a flagged host must also lie this far (log scale) from the others."""
    x = np.asarray(d, dtype=float)
    groups = _groups(x, hosts)
    k, n_total = len(groups), x.size
    dfw = n_total - k
    ssw = float(sum(((v - v.mean()) ** 2).sum() for v in groups.values()))
    s2 = ssw / dfw if dfw > 0 else None
    est = _flags(groups, s2, flag_floor, flag_limit(dfw) if dfw > 0 else math.inf) \
        if k >= 2 else tuple(
        HostEstimate(h, int(v.size), float(v.mean()), None, None, False)
        for h, v in groups.items())
    pooled = t_interval(x, alpha)

    def as_pooled(q: float | None = None, q_p: float | None = None,
                  tau2: float = 0.0) -> HostInterval:
        se = pooled.sd / math.sqrt(n_total) if n_total > 1 else math.inf
        return HostInterval("pooled", pooled.mean, se, n_total - 1, pooled.lo, pooled.hi,
                            pooled.p, tau2, q, q_p, est)

    if k < 2 or s2 is None:
        # one host, or one round on each host: the rounds' own t interval is then the
        # random-effects one too (each round is its host's mean)
        return as_pooled()
    n = np.array([v.size for v in groups.values()], dtype=float)
    means = np.array([v.mean() for v in groups.values()])
    grand = float((n * means).sum() / n.sum())
    ssb = float((n * (means - grand) ** 2).sum())
    if s2 == 0.0:
        # every round of a host gave the same log-ratio (memory, token counts): the
        # hosts agree exactly, or they differ with certainty
        if ssb == 0.0:
            return as_pooled(0.0, 1.0)
        q, q_p = math.inf, 0.0
        tau2 = float(means.var(ddof=1))
    else:
        q = ssb / s2
        q_p = float(sps.f.sf(q / (k - 1), k - 1, dfw))
        w = n / s2
        tau2 = max(0.0, (q - (k - 1)) / float(w.sum() - (w ** 2).sum() / w.sum()))
    switch = {"auto": q_p < heterogeneity_alpha or any(h.flagged for h in est),
              "pooled": False, "random": True, "dl": tau2 > 0}[rule]
    if not switch:
        return as_pooled(q, q_p, tau2)
    wr = 1.0 / (s2 / n + tau2)  # s2 and tau2 are not both 0 here
    mean = float((wr * means).sum() / wr.sum())
    se_dl = 1.0 / math.sqrt(float(wr.sum()))
    se_hk = math.sqrt(float((wr * (means - mean) ** 2).sum() / ((k - 1) * wr.sum())))
    se = max(se_dl, se_hk)
    df = k - 1
    if se == 0.0:
        lo = hi = mean
        p = 1.0 if mean == 0 else 0.0
    else:
        half = float(sps.t.ppf(1 - alpha / 2, df)) * se
        lo, hi = mean - half, mean + half
        p = float(2 * sps.t.sf(abs(mean) / se, df))
    return HostInterval("random", mean, se, df, lo, hi, p, tau2, q, q_p, est)


def hosts_to_decide(mean: float, host_var: float, band: float, *, alpha: float = 0.05,
                    max_hosts: int = 1000) -> int | None:
    """About how many hosts in all would decide a random-effects cell: the smallest H
    whose 1 - 2 alpha t half-width t_{H-1} sqrt(host_var / H) clears the band's edge, where
    ``host_var`` is the variance of one host's mean (within-host noise over its rounds,
    plus tau^2). None when no H up to ``max_hosts`` would."""
    gap = abs(abs(mean) - band)
    if gap == 0 or not math.isfinite(host_var):
        return None
    for h in range(2, max_hosts + 1):
        if float(sps.t.ppf(1 - alpha, h - 1)) * math.sqrt(host_var / h) < gap:
            return h
    return None


@dataclass(frozen=True)
class BlockComparison(Comparison):
    """A :class:`~abbench.stats.paired.Comparison` whose rounds ran on several hosts."""

    method: Method = "pooled"
    hosts: tuple[HostEstimate, ...] = ()
    tau: float | None = None
    heterogeneity_p: float | None = None
    df: int | None = None
    #: random effects, undecided: about how many hosts in all would decide the cell
    #: (more rounds on the same hosts hardly narrow its interval)
    hosts_needed: int | None = None

    @property
    def flagged(self) -> list[str]:
        return [h.host for h in self.hosts if h.flagged]


def _frac(x: float) -> float:
    return math.expm1(x) if math.isfinite(x) else x


def compare_blocks(base: Mapping[int, float], arm: Mapping[int, float],
                   hosts: Mapping[int, str], *, direction: str = "higher",
                   alpha: float = 0.05, noise_band: float = 0.01, base_name: str = "baseline",
                   arm_name: str = "arm", rule: Rule = "auto",
                   heterogeneity_alpha: float = HETEROGENEITY_ALPHA,
                   paired: Comparison | None = None, kind: Kind = "sampled"
                   ) -> Comparison | None:
    """One cell with hosts as blocks; ``hosts``: round -> host. With rounds of one host
    only, exactly :func:`~abbench.stats.paired.compare` (``paired``: that comparison,
    when the caller has it already)."""
    c = paired if paired is not None else compare(
        base, arm, direction=direction, alpha=alpha, noise_band=noise_band,
        base_name=base_name, arm_name=arm_name, kind=kind)
    rounds, d = log_ratios(base, arm) if base and arm else ([], np.array([]))
    names = [hosts.get(r, "?") for r in rounds]
    if c is None or len(set(names)) < 2:
        return c
    band = math.log1p(noise_band)
    hi = host_interval(d, names, alpha=2 * alpha, rule=rule, flag_floor=band / 2,
                       heterogeneity_alpha=heterogeneity_alpha)
    copy: dict[str, Any] = {f.name: getattr(c, f.name) for f in fields(Comparison)}
    k = len(hi.hosts)
    tau_s = f"tau {math.sqrt(hi.tau2) * 100:.2f}%"
    het = f"heterogeneity p {hi.heterogeneity_p:.2g}" if hi.heterogeneity_p is not None \
        else None
    extra: dict[str, Any] = {"hosts": hi.hosts, "tau": math.sqrt(hi.tau2),
                             "heterogeneity_p": hi.heterogeneity_p, "df": hi.df}
    warnings = list(c.warnings)
    if hi.flagged:
        warnings.append("host(s) unlike the others: " + ", ".join(
            f"{h.host} {h.change * 100:+.1f}% over {h.n} round(s)"
            for h in hi.hosts if h.flagged))
    if hi.method == "pooled":
        how = f"pooled over {k} hosts that agree ({het})" if het else \
            f"over {k} hosts of one round each (host and round noise cannot be told apart)"
        copy.update(test=f"{c.test}, {how}", warnings=tuple(warnings))
        return BlockComparison(**copy, method="pooled", **extra)
    lo_edge, hi_edge = band_edges(noise_band)
    p_band = p_beyond_band_se(hi.mean, hi.se, hi.df, hi_edge, lo_edge)
    need = None
    verdict: Verdict
    if p_band < alpha:
        verdict = "changed"
    elif hi.lo >= lo_edge and hi.hi <= hi_edge:
        verdict = "within_noise"
    else:
        verdict = "inconclusive"
        warnings.append(f"the {k} hosts disagree ({tau_s}): more hosts narrow this "
                        "interval, more rounds on the same hosts hardly")
        need = hosts_to_decide(hi.mean, hi.se ** 2 * k, band, alpha=alpha)
    copy.update(
        verdict=verdict, change=_frac(hi.mean), lo=_frac(hi.lo), hi=_frac(hi.hi),
        half_width=(hi.hi - hi.lo) / 2, p=p_band, p_raw=p_band,
        test=f"random effects over {k} hosts ({tau_s}, {het or 'exact rounds'}), t with "
             f"{hi.df} df",
        better=(hi.mean > 0) == (direction == "higher") if verdict == "changed" else None,
        t_p=hi.p, t_lo=_frac(hi.lo), t_hi=_frac(hi.hi), exact=False, rounds_needed=None,
        warnings=tuple(warnings))
    return BlockComparison(**copy, method="random", hosts_needed=need, **extra)


def round_hosts(records: Sequence[Record]) -> dict[int, str]:
    """round -> host from the samples' ``host`` field (a gathered run's). Empty unless
    every sample names a host and the arms of each round name the same one (rounds
    paired by index across runs, :func:`abbench.report.compare.compare_table`, are no
    blocks)."""
    out: dict[int, str] = {}
    bare = False  # a sample without a host (the other run's, in a compare)
    for rec in records:
        if not isinstance(rec, Sample):
            continue
        if rec.host is None:
            bare = True
            continue
        r, h = rec.round, rec.host
        if out.setdefault(r, h) != h:
            return {}
    return {} if bare else out
