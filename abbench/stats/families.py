"""The table's multiplicity families and what an undecided cell needs: :func:`adjust`
tests each family's cells together (a selective Benjamini-Hochberg, the "Also changed"
family gated by the shown one's changes) and gives each undecided cell its rounds to
decide (:func:`rounds_for`), with the noise its like cells share (:func:`pooled_sd`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special as sc

from abbench.stats.decide import rounds_to_decide
from abbench.stats.paired import Comparison, band_edges, benjamini_hochberg


def rounds_for(c: Comparison, alpha_changed: float, pooled: Pool | None = None) -> int | None:
    """Rounds in all that would decide an undecided cell with 80% chance
    (:func:`abbench.stats.decide.rounds_to_decide`), "changed" at ``alpha_changed``
    (the family's adjusted level); None for a decided cell. ``pooled``: what the like
    cells say of the noise (:func:`pooled_sd`): the cell's sd moderated towards theirs,
    by a prior of however few degrees of freedom (one pooled over all only adds where
    it has more than the cell's own). Under bimodal lives the sd is the two-level
    model's: lives at either level with even odds on each arm."""
    if c.verdict not in ("inconclusive", "too_few_rounds") or c.change is None \
            or c.sd_log is None:
        return None
    lo, hi = band_edges(c.noise_band)
    sd, known = c.sd_log, False
    df = None
    spread = None
    if pooled is not None and (pooled.prior or pooled.df > c.n - 1):
        sd, df = pooled.moderate(c.sd_log, c.n - 1)
        spread = pooled.spread
    if c.bimodal is not None:
        sd, known = max(sd, c.bimodal / math.sqrt(2.0)), True
    return rounds_to_decide(math.log1p(c.change), sd, c.n, lo, hi, alpha_changed=alpha_changed,
                            alpha_within=c.alpha, sd_known=known, df=df, spread=spread)


@dataclass(frozen=True)
class Pool:
    """What cells of one metric in one family say of their noise: the prior variance of
    a cell's log-ratios ``sd``^2 with its degrees of freedom ``df`` (every cell's
    together where the cells' sds differ no more than chance would make them: one noise,
    pooled; fewer where they differ more), and the variance of the true effects around
    0 (``spread``; None below three cells)."""

    sd: float
    df: int
    spread: float | None
    #: False: ``sd`` pools every cell, the cell's own rounds included
    prior: bool = False

    def moderate(self, sd: float, df: int) -> tuple[float, int]:
        """A cell's sd and degrees of freedom, moderated towards the pool's (Smyth 2004):
        (df_0 s_0^2 + df s^2) / (df_0 + df), with df_0 + df degrees of freedom."""
        if not self.prior:
            return self.sd, self.df
        return math.sqrt((self.df * self.sd**2 + df * sd**2) / (self.df + df)), self.df + df


def pooled_sd(comps: Sequence[Comparison]) -> Pool | None:
    """Over cells of one metric: the noise they share (:class:`Pool`). With three cells
    or more, whether their sds differ more than the sampling error of sds would make
    them (Smyth's empirical Bayes, limma: the variance of log s^2 beyond its expected
    trigamma(df / 2)): if not, one sd pooled over all (variances weighted by their
    degrees of freedom); if so, a prior of that many degrees of freedom, each cell
    keeping its own sd in part. None without two rounds anywhere."""
    cells = [(c.sd_log, c.n, c.change) for c in comps if c.sd_log is not None and c.n >= 2
             and math.isfinite(c.sd_log) and c.sd_log > 0 and not c.exact
             and c.change is not None]
    df = sum(n - 1 for _s, n, _m in cells)
    if df == 0:
        return None
    var = sum(s * s * (n - 1) for s, n, _m in cells) / df
    if len(cells) < 3:
        return Pool(math.sqrt(var), df, None)
    spread = max(0.0, float(np.mean([math.log1p(m) ** 2 - var / n for _s, n, m in cells])))
    half = np.array([(n - 1) / 2 for _s, n, _m in cells])
    e = np.log([s * s for s, _n, _m in cells]) - sc.digamma(half) + np.log(half)
    excess = float(e.var(ddof=1) - np.mean(sc.polygamma(1, half)))
    if excess <= 0 or (d0 := 2 * _trigamma_inverse(excess)) >= df:
        return Pool(math.sqrt(var), df, spread)
    s0 = math.exp(float(e.mean()) + sc.digamma(d0 / 2) - math.log(d0 / 2))
    return Pool(math.sqrt(s0), max(1, round(d0)), spread, prior=True)


def _trigamma_inverse(y: float) -> float:
    """x with trigamma(x) = y (Smyth's Newton iteration, from 0.5 + 1/y)."""
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = float(sc.polygamma(1, x))
        step = tri * (1 - tri / y) / float(sc.polygamma(2, x))
        x += step
        if -step / x < 1e-8:
            break
    return x


#: a cell joins its family's test when its p is at most this (for "beyond the band",
#: when its estimate lies beyond the band or near its edge), and its p is divided by it
#: (benchmarks/simulate.py measured 0.5, 0.7 and 0.8: docs/simulation.md) ...
SELECT = 0.8
#: ... in families of at least this many cells; a smaller one is tested whole: its
#: cells are mostly the change itself (the users' three decode rows), and doubling
#: their p would cost more than the few null cells dilute
SELECT_FROM = 5
#: the share of alpha a table's counted cells get when it has timed cells too (the
#: timed ones get the rest); a family alone gets all of it
COUNTS_SHARE = 0.1
#: the family tested only as far as the others changed (the "Also changed" rows)
GATED = "also"


def _shares(names: Sequence[str]) -> dict[str, float]:
    """Each primary family's share of alpha: ``table`` and ``counts`` split it
    (:data:`COUNTS_SHARE`) when both are there; any other family, alone, all of it."""
    both = "table" in names and "counts" in names
    return {n: (1 - COUNTS_SHARE if n == "table" else COUNTS_SHARE) if both else 1.0
            for n in names}


def adjust(comps: Sequence[Comparison], families: Sequence[str] | None = None,
           metrics: Sequence[str] | None = None) -> list[Comparison]:
    """Multiplicity within each family (``families[k]``: cell k's; default one family),
    the families sharing alpha so that a table where nothing changed says "changed"
    anywhere in at most alpha of runs.

    Exact cells (every round the same log-ratio of a deterministic metric) carry no
    sampling error and stay outside every family. The primary families (the table's
    timed cells, its counted cells: :func:`_shares`) split alpha; the :data:`GATED`
    family (rows not shown, mirrors) is tested after them at alpha times the share of
    their cells that changed (parallel gatekeeping: nothing, where nothing shown
    changed; all of alpha where there is no primary family). Within a family of fewer
    than :data:`SELECT_FROM` cells, Benjamini-Hochberg over all of them. In a larger
    one, the cells whose p is at most :data:`SELECT` are tested, each at p / SELECT,
    with Benjamini-Hochberg over them alone: a p of "beyond the band" is uniform at the
    band's edge and stochastically larger inside it with a rising density
    (:func:`p_beyond_band_se`), so P(p <= t | p <= SELECT) <= t / SELECT and the
    rescaled p is valid given the selection (Zhao, Small and Su, JASA 2019); the many
    cells whose estimate sits well inside the band no longer dilute the one that moved.
    The adjusted p is that p divided by the family's share (1 where the share is 0); a
    "changed" cell whose adjusted p is not below alpha becomes inconclusive. An
    undecided cell's rounds are then those that would decide it at its family's
    adjusted level, with the sd pooled over the family's cells of its metric
    (``metrics[k]``: cell k's) where there are several: at 3 rounds one cell's sd has 2
    degrees of freedom, and the cells whose rounds happened to agree would promise a
    verdict in a few more."""
    fam = list(families) if families is not None else ["table"] * len(comps)
    met = list(metrics) if metrics is not None else [""] * len(comps)
    pools = {key: pooled_sd([c for c, f, m in zip(comps, fam, met, strict=True)
                             if (f, m) == key and c.kind == "sampled"])
             for key in set(zip(fam, met, strict=True))}
    tested = {k for k, c in enumerate(comps) if c.p_raw is not None and c.n >= 2
              and not c.exact}
    names = list(dict.fromkeys(fam[k] for k in sorted(tested)))
    primary = [n for n in names if n != GATED]
    shares = _shares(primary)
    out = list(comps)
    changed = cells = 0
    for name in [*primary, *([GATED] if GATED in names else [])]:
        share = shares.get(name, changed / cells if cells else 1.0)
        idx = [k for k in sorted(tested) if fam[k] == name]
        raw = [float(comps[k].p_raw) for k in idx]  # type: ignore[arg-type]
        if len(idx) >= SELECT_FROM:
            sel = [j for j, p in enumerate(raw) if p <= SELECT]
            adj = [1.0] * len(idx)
            for j, pa in zip(sel, benjamini_hochberg([raw[j] / SELECT for j in sel]),
                             strict=True):
                adj[j] = pa
            m, scale = max(1, len(sel)), SELECT
        else:
            adj, m, scale = benjamini_hochberg(raw), max(1, len(idx)), 1.0
        adj = [min(1.0, pa / share) if share > 0 else 1.0 for pa in adj]
        kept = sum(1 for k, pa in zip(idx, adj, strict=True)
                   if comps[k].verdict == "changed" and pa < comps[k].alpha)
        if name != GATED:
            changed, cells = changed + kept, cells + len(idx)
        # the level the rounds are counted at: a closed gate as if one cell had changed
        at = share if share > 0 else 1.0 / max(1, cells)
        for k, pa in zip(idx, adj, strict=True):
            c = comps[k]
            verdict = c.verdict
            if verdict == "changed" and pa >= c.alpha:
                verdict = "inconclusive"
            c = replace(c, p=pa, verdict=verdict, comparisons=len(idx), family=name,
                        better=c.better if verdict == "changed" else None)
            joins = m + (1 if scale < 1 and (c.p_raw or 1.0) > SELECT else 0)
            level = c.alpha * at * scale * min(joins, kept + 1) / joins
            pool = pools[fam[k], met[k]] if c.kind == "sampled" else None
            out[k] = replace(c, rounds_needed=rounds_for(c, level, pool))
    return out
