"""The table's multiplicity families and what an undecided cell needs: :func:`adjust`
tests each family's cells together (a selective Benjamini-Hochberg, the "Also changed"
family gated by the shown one's changes) and gives each undecided cell its rounds to
decide (:func:`rounds_for`), with the noise its like cells share (:func:`pooled_sd`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize
from scipy import special as sc
from scipy import stats as sps

from abbench.stats.decide import rounds_to_decide
from abbench.stats.paired import Comparison, band_edges, benjamini_hochberg

#: the level at which like cells' estimates must spread more than noise for the rounds
#: to decide to assume true effects spread around 0 (:attr:`Pool.spread`): the
#: verdicts' default level
SPREAD_LEVEL = 0.05


def rounds_for(c: Comparison, alpha_changed: float, pooled: Pool | None = None,
               signal: float | None = None) -> int | None:
    """Rounds in all that would decide an undecided cell with 80% chance
    (:func:`abbench.stats.decide.rounds_to_decide`), "changed" at ``alpha_changed``
    (the family's adjusted level); None for a decided cell. ``pooled``: what the like
    cells say of the noise (:func:`pooled_sd`): the cell's sd moderated towards theirs,
    by a prior of however few degrees of freedom (one pooled over all only adds where
    it has more than the cell's own). Where the verdict tested that moderated sd
    (``c.moderated``), the verdict after N rounds will too: its degrees of freedom are
    taken to grow as today's do over n - 1. Under bimodal lives the sd is the two-level
    model's: lives at either level with even odds on each arm. A cell without like cells
    to say how far true effects spread (fewer than three, a counted cell) takes the
    table's: ``signal`` (:func:`table_signal`) times its own squared standard error; a
    count's standard error is the binomial one, taken as known. A sampled cell whose
    rounds all gave one log-ratio (a discrete metric: token counts of a replay) is
    decided by the sign test (:func:`~abbench.stats.paired.sign_p_band`): its rounds are
    those at which 2^(1 - N) falls below the level, should the rounds go on agreeing."""
    if c.verdict not in ("inconclusive", "too_few_rounds") or c.change is None \
            or c.sd_log is None:
        return None
    lo, hi = band_edges(c.noise_band)
    if c.agrees:  # the sign test
        level = alpha_changed if not lo <= math.log1p(c.change) <= hi else c.alpha
        return max(c.n + 1, math.floor(1 - math.log2(level)) + 1) if level > 0 else None
    sd, known = c.sd_log, False
    df = None
    spread = None
    gain = 1.0
    if pooled is not None and (pooled.prior or pooled.df > c.n - 1):
        sd, dff = pooled.moderate(c.sd_log, c.n - 1)
        df, spread = int(dff), pooled.spread
    if c.moderated is not None:  # the verdict at N tests with the moderated sd too
        gain = max(1.0, c.moderated[1] / (c.n - 1))
    if c.bimodal is not None:
        sd, known = max(sd, c.bimodal / math.sqrt(2.0)), True
    if c.kind == "counted":
        known = True
    if spread is None and signal is not None:
        spread = signal * sd * sd / c.n
    return rounds_to_decide(math.log1p(c.change), sd, c.n, lo, hi, alpha_changed=alpha_changed,
                            alpha_within=c.alpha, sd_known=known, df=df, spread=spread,
                            df_gain=gain)


@dataclass(frozen=True)
class Pool:
    """What cells of one metric in one family say of their noise: the prior variance of
    a cell's log-ratios ``sd``^2 with its degrees of freedom ``df`` (every cell's
    together where the cells' sds differ no more than chance would make them: one noise,
    pooled; fewer where they differ more), and the variance of the true effects around
    0 (``spread``; None below three cells)."""

    sd: float
    df: float
    #: False: ``sd`` pools every cell, the cell's own rounds included
    prior: bool = False
    #: the pool's effective degrees of freedom (:func:`effective_df`): cells whose
    #: rounds rise and fall together (one server life under every row) know less of the
    #: noise than their degrees of freedom add up to; None: taken as independent
    effective: float | None = None
    #: the cells pooled
    cells: int = 0
    #: over the cells, sum of (squared mean log-ratio - its sampling variance) and sum
    #: of that variance: what :func:`table_signal` adds up; None below three cells
    effects: tuple[float, float] | None = None
    #: how many independent cells the pooled ones are worth (their effective degrees of
    #: freedom over their own per cell); None: taken as independent
    worth: float | None = None
    #: the degrees of freedom of the sd that ``effects`` measures the estimates'
    #: sampling variance with (every cell's, at most the effective count)
    noise_df: float | None = None
    #: where one of the cells is "changed" in the table (:func:`adjust` sets it): the
    #: variance of the true effects that the others show beyond their noise (0 or more).
    #: The effects spread, whatever the noise, but the change is no measure of how far
    #: the others' do
    moved: float | None = None
    #: of the cell whose squared mean log-ratio is largest: its excess over its sampling
    #: variance, and that variance (what ``effects`` adds up for it)
    top: tuple[float, float] | None = None

    @property
    def spread(self) -> float | None:
        """The variance of the true effects around 0 (None below three cells):
        :attr:`moved` where one of the cells changed; else 0 unless the cells' estimates
        spread more than noise would make them at the level :data:`SPREAD_LEVEL` (a
        preliminary test): their mean square over the sampling variance the pooled sd
        gives it, an F of the cells' :attr:`worth` over the pool's effective degrees of
        freedom (at 2 rounds, one cell's: only a cell that moved shows a spread there);
        then the excess, per cell, if the cells but the largest (:attr:`top`) pass the
        same test: one cell that moved is no spread the others share. An estimate taken
        whenever it is over 0 read chance as spread in 37-50% of A/A pools of five
        cells, and an undecided null cell's rounds then assumed that its chance offset
        was partly real: k erred long (docs/simulation.md, the seventh pass); so did
        the four null decode rows' beside one +2% (the eighth pass)."""
        if self.effects is None:
            return None
        if self.moved is not None:
            return self.moved
        excess, noise = self.effects
        if not self.beyond_noise(excess, noise, self.cells):
            return 0.0
        if self.top is not None and not self.beyond_noise(excess - self.top[0],
                                                      noise - self.top[1], self.cells - 1):
            return 0.0  # one cell moved; the others show no spread
        return max(0.0, excess / self.cells)

    def beyond_noise(self, excess: float, noise: float, cells: int) -> bool:
        """Whether ``cells`` of the pool, of this excess and sampling variance, spread
        more than noise would make them at :data:`SPREAD_LEVEL`."""
        worth = (self.worth or self.cells) * cells / self.cells
        return noise > 0 and (excess + noise) / noise > sps.f.ppf(
            1 - SPREAD_LEVEL, worth, self.noise_df or math.inf)

    def beside(self, rest: Sequence[Comparison]) -> Pool:
        """This pool where one of its cells changed: its spread of effects (:attr:`moved`)
        is what ``rest``, its cells that did not, show beyond their noise. Taken over
        every cell, the one +2% among five decode rows was read as a spread all of them
        share, and the null rows' k erred long (decided at n + k in 89.9% of cells from
        6 rounds; 84.7% so: docs/simulation.md, the seventh pass)."""
        excess = _excess(self.sd * self.sd, [(c.n, c.change or 0.0) for c in rest])
        return replace(self, moved=max(0.0, excess / len(rest)) if rest else 0.0)

    def moderate(self, sd: float, df: float) -> tuple[float, float]:
        """A cell's sd and degrees of freedom, moderated towards the pool's (Smyth 2004):
        (df_0 s_0^2 + df s^2) / (df_0 + df), with df_0 + df degrees of freedom; df_0 at
        most what the pool knows beyond the cell's own rounds (the effective degrees of
        freedom less ``df``)."""
        cap = math.inf if self.effective is None else self.effective
        if not self.prior:
            return self.sd, max(float(df), min(self.df, cap))
        d0 = min(self.df, max(0.0, cap - df))
        if d0 <= 0:
            return sd, df
        return math.sqrt((d0 * self.sd**2 + df * sd**2) / (d0 + df)), d0 + df


def effective_df(ratios: Sequence[Mapping[int, float]]) -> float | None:
    """The degrees of freedom a variance pooled over these cells has (a Satterthwaite
    count): each cell's log-ratios by round; over the rounds two cells share, their
    residuals' correlation r. The pooled variance of cells with df_i degrees of freedom,
    df_ij of them over shared rounds, has variance 2 sigma^4 sum_ij df_ij rho_ij^2 / D^2
    (D = sum df_i), that of a chi-square with D^2 / sum_ij df_ij rho_ij^2: D where the
    cells are independent, one cell's where they move together. The rho^2 summed is
    one for all pairs, the rho^2 at which r^2 would average what the pairs show
    (:func:`_rho2`): r^2 over few rounds is no estimate of rho^2 (over 3 rounds it
    averages 1/2 for independent cells, and 0.57 where rho^2 is 1/4), and the mean of
    many pairs' r^2 is one of little noise, which taken back through that average gives
    a count near the truth: median 2.9 cells' worth at 4 rounds and 2.7 at 6 for five
    cells that share half their noise (true 2.5), where r^2 adjusted pair by pair,
    (r^2 - 1/m) / (1 - 1/m), read 3.5 and 3.1, and more than half the pools of 3 rounds
    as independent. From two shared rounds r^2 is 1 whatever the cells do, and is kept:
    a pool of 2 rounds knows no more than one cell. The count over n - 1 estimates
    k / (1 + (k - 1) mean rho^2) for k cells of n rounds, whatever n: what more rounds
    will give too. None below two cells."""
    cells = [(np.array(sorted(r)), np.array([r[k] for k in sorted(r)], dtype=float))
             for r in ratios if len(r) >= 2]
    if len(cells) < 2:
        return None
    total = sum(x.size - 1 for _r, x in cells)
    pairs: list[tuple[int, float]] = []  # (df_ij, r^2) of each pair over its shared rounds
    for i, (ri, xi) in enumerate(cells):
        for rj, xj in cells[i + 1:]:
            both, ia, ja = np.intersect1d(ri, rj, return_indices=True)
            if both.size < 2:
                continue
            a, b = xi[ia] - xi[ia].mean(), xj[ja] - xj[ja].mean()
            den = float(np.sqrt((a * a).sum() * (b * b).sum()))
            r2 = 1.0 if den == 0 else (float((a * b).sum()) / den) ** 2
            if math.isfinite(r2):  # min(1.0, nan) would be 1.0: a pair of no figure
                pairs.append((both.size - 1, min(1.0, r2)))
    two = sum(m for m, _r2 in pairs if m < 2)  # r^2 is 1 there: kept
    rest = [(m, r2) for m, r2 in pairs if m >= 2]
    acc = total + 2 * two + 2 * sum(m for m, _r2 in rest) * _rho2(rest)
    return total * total / acc


def _mean_r2(rho2: float, m: np.ndarray) -> np.ndarray:
    """E r^2 of a bivariate normal pair over m + 1 rounds (each m >= 2) whose
    correlation squared is ``rho2`` < 1 (Olkin & Pratt 1958): 1 - (m - 1)/m (1 - rho^2)
    2F1(1, 1; (m + 2)/2; rho^2)."""
    c = (m + 2) / 2
    f = np.empty_like(c)
    small = c <= 40
    f[small] = sc.hyp2f1(1.0, 1.0, c[small], rho2)
    if not small.all():  # scipy's overflows past c of about 100 near rho^2 = 1; the
        # series sum_k k! z^k / (c)_k, whose terms fall at least as fast as k^-(c - 1)
        k = np.arange(1, 400)[:, None]
        f[~small] = 1 + np.cumprod(k * rho2 / (c[~small] + k - 1), axis=0).sum(axis=0)
    return 1.0 - (m - 1) / m * (1.0 - rho2) * f


def _rho2(pairs: Sequence[tuple[int, float]]) -> float:
    """The rho^2, one for all pairs, at which their r^2 (each over m + 1 shared rounds,
    weighed by m) would average what they do (:func:`_mean_r2`), in [0, 1]."""
    if not pairs:
        return 0.0
    m, r2 = (np.array(x, dtype=float) for x in zip(*pairs, strict=True))
    seen = float((m * r2).sum())
    ms, at = np.unique(m, return_inverse=True)  # pairs mostly share their rounds
    weight = np.bincount(at, weights=m)

    def gap(rho2: float) -> float:
        return float((weight * _mean_r2(rho2, ms)).sum()) - seen

    top = 1.0 - 1e-9
    if gap(0.0) >= 0:
        return 0.0
    if gap(top) <= 0:
        return 1.0
    return float(optimize.brentq(gap, 0.0, top, xtol=1e-6))


def pooled_sd(comps: Sequence[Comparison],
              ratios: Sequence[Mapping[int, float]] | None = None) -> Pool | None:
    """Over cells of one metric: the noise they share (:class:`Pool`). With three cells
    or more, whether their sds differ more than the sampling error of sds would make
    them (Smyth's empirical Bayes, limma: the variance of log s^2 beyond its expected
    trigamma(df / 2)): if not, one sd pooled over all (variances weighted by their
    degrees of freedom); if so, a prior of that many degrees of freedom, each cell
    keeping its own sd in part. ``ratios``: the cells' log-ratios by round, for the
    pool's effective degrees of freedom (:func:`effective_df`). None without two rounds
    anywhere."""
    keep = [k for k, c in enumerate(comps) if c.sd_log is not None and c.n >= 2
            and math.isfinite(c.sd_log) and c.sd_log > 0 and not c.exact
            and c.change is not None]
    cells = [(comps[k].sd_log or 0.0, comps[k].n, comps[k].change or 0.0) for k in keep]
    eff = effective_df([ratios[k] for k in keep]) if ratios is not None else None
    df = sum(n - 1 for _s, n, _m in cells)
    if df == 0:
        return None
    var = sum(s * s * (n - 1) for s, n, _m in cells) / df
    if len(cells) < 3:
        return Pool(math.sqrt(var), df, effective=eff, cells=len(cells))
    worth = len(cells) * eff / df if eff is not None else None
    noise_df = min(df, eff) if eff is not None else df
    effects = (_excess(var, [(n, m) for _s, n, m in cells]),
               float(sum(var / n for _s, n, _m in cells)))
    big = max(cells, key=lambda c: math.log1p(c[2]) ** 2)
    top = (_excess(var, [(big[1], big[2])]), var / big[1])
    half = np.array([(n - 1) / 2 for _s, n, _m in cells])
    e = np.log([s * s for s, _n, _m in cells]) - sc.digamma(half) + np.log(half)
    excess = float(e.var(ddof=1) - np.mean(sc.polygamma(1, half)))
    if excess <= 0 or (d0 := 2 * _trigamma_inverse(excess)) >= df:
        return Pool(math.sqrt(var), df, effective=eff, cells=len(cells), effects=effects,
                    worth=worth, noise_df=noise_df, top=top)
    s0 = math.exp(float(e.mean()) + sc.digamma(d0 / 2) - math.log(d0 / 2))
    return Pool(math.sqrt(s0), max(1, round(d0)), prior=True, effective=eff,
                cells=len(cells), effects=effects, worth=worth, noise_df=noise_df, top=top)


def _excess(var: float, cells: Iterable[tuple[int, float]]) -> float:
    """Over cells of (rounds, change): the sum of their squared mean log-ratios beyond
    the sampling variance an sd of ``var`` per round gives each."""
    return float(sum(math.log1p(m) ** 2 - var / n for n, m in cells))


def table_signal(pools: Iterable[Pool | None]) -> float | None:
    """How far true effects spread in this table, in units of their estimates' sampling
    variance: over every pool of three cells or more, the spread of effects it shows
    (:attr:`Pool.spread`: none unless its estimates spread more than noise, not from
    one cell alone), times its cells, over their sampling variance, summed: 0 where no
    pool shows a spread. A lone cell borrows it (:func:`rounds_for`): its estimate
    alone cannot tell noise from effect, and a flat prior would read a chance estimate
    as the change. Summed ungated, a chance excess in null rows, or one decode row's
    +2%, gave the table's quality counts a wide prior, and their k erred short (0 of
    35 cells decided at n + k, docs/simulation.md, the ninth pass). None without such a
    pool."""
    got = [p for p in pools if p is not None and p.effects is not None]
    noise = sum(p.effects[1] for p in got if p.effects is not None)
    if not got or noise <= 0:
        return None
    return sum((p.spread or 0.0) * p.cells for p in got) / noise


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


def family_pools(comps: Sequence[Comparison], families: Sequence[str],
                 metrics: Sequence[str],
                 ratios: Sequence[Mapping[int, float]] | None = None
                 ) -> dict[tuple[str, str], Pool | None]:
    """The :class:`Pool` of each (family, metric): its sampled cells' noise, with the
    effective degrees of freedom from their log-ratios by round where given."""
    out = {}
    for key in set(zip(families, metrics, strict=True)):
        idx = [k for k, (f, m) in enumerate(zip(families, metrics, strict=True))
               if (f, m) == key and comps[k].kind == "sampled"]
        out[key] = pooled_sd([comps[k] for k in idx],
                             [ratios[k] for k in idx] if ratios is not None else None)
    return out


def adjust(comps: Sequence[Comparison], families: Sequence[str] | None = None,
           metrics: Sequence[str] | None = None,
           pools: Mapping[tuple[str, str], Pool | None] | None = None) -> list[Comparison]:
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
    verdict in a few more. ``pools``: those of :func:`family_pools` (default: from the
    cells' sds alone)."""
    fam = list(families) if families is not None else ["table"] * len(comps)
    met = list(metrics) if metrics is not None else [""] * len(comps)
    if pools is None:
        pools = family_pools(comps, fam, met)
    tested = {k for k, c in enumerate(comps) if c.p_raw is not None and c.n >= 2
              and not c.exact}
    names = list(dict.fromkeys(fam[k] for k in sorted(tested)))
    primary = [n for n in names if n != GATED]
    shares = _shares(primary)
    out = list(comps)
    changed = cells = 0
    levels: dict[int, float] = {}  # the level each tested cell's rounds are counted at
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
            levels[k] = c.alpha * at * scale * min(joins, kept + 1) / joins
            out[k] = c
    # where a like cell changed, the spread of effects is what the others show
    final = dict(pools)
    for key in {(fam[k], met[k]) for k in levels if out[k].verdict == "changed"}:
        if (pool := pools.get(key)) is not None and pool.effects is not None:
            final[key] = pool.beside([out[j] for j in levels if (fam[j], met[j]) == key
                                      and out[j].verdict != "changed"
                                      and out[j].kind == "sampled"
                                      and out[j].change is not None])
    signal = table_signal(final.values())
    for k, level in levels.items():
        c = out[k]
        pool = final[fam[k], met[k]] if c.kind == "sampled" else None
        out[k] = replace(c, rounds_needed=rounds_for(c, level, pool, signal))
    return out
