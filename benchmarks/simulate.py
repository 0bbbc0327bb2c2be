"""Simulation study of abbench's verdicts: do they hold what they promise?

One command: ``.venv/bin/python benchmarks/simulate.py`` (about four minutes of CPU on one
core); prints the tables and writes them into docs/simulation.md from its marker comment
on (:data:`MARKER`; the hand-written text above it is kept).

Every campaign goes through the real code: the slot order from
abbench.model.schedule.make_schedule (a fresh seed per campaign); every cell of a table
of several rows and arms compared by abbench.report.table.compare_rows, which is what
table_of runs (compare() per cell, then adjust(): Benjamini-Hochberg over the table's
cells); and for --until-ci the look schedule, per-look alpha, block sizes and stop rule
of abbench.stats.stopping, in the loop of abbench.campaign.until_ci. While a study
runs, some helpers of abbench.stats.paired are swapped for faster equivalents that give
the same comparisons (:func:`fast_paths`; tests/unit/test_simulate.py checks that, and
that the tables equal what table_of makes from the same values as records).

Each arm's per-round value (reps already averaged) on a noisy row is
``level * exp(effect + drift + life + row)``: ``life`` is common to every row of one
server life (one slot), ``row`` is the row's own; their variances add to ``sigma``^2
(half each unless said otherwise). The noise models (:data:`NOISES`) change their shape:
normal, t with 3 degrees of freedom (same sd), single-round outliers (a server life that
runs slow on every row), slow drift (linear in the slot's place in time, on every arm),
bimodal server lives (each life at one of two levels 9% apart, on top of the normal
noise). Exact rows (peak memory in MiB, misses/token) give the same value every round.

The statistics studied are abbench's own; docs/simulation.md keeps, beside this run's
tables, the figures of the rules they replaced (from this script at e9d6706).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import itertools
import math
import os
import time
import zlib
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy import special as sc
from scipy import stats as sps

from abbench.config.stats import StatsConfig, TableConfig
from abbench.model.metrics import spec
from abbench.model.rows import RowKey
from abbench.model.schedule import Order, make_schedule
from abbench.report.selection import pick_rows
from abbench.report.table import Cell, Row, compare_rows
from abbench.report.verdicts import MANY_ROUNDS
from abbench.stats import cells as cells_mod
from abbench.stats import decide, paired
from abbench.stats.paired import Comparison
from abbench.stats.stopping import (
    ON_VERDICTS,
    block_size,
    look_alphas,
    max_rounds,
    planned_looks,
    report_alpha,
    stop_reason,
)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "simulation.md"
MARKER = "<!-- tables -->"
ALPHA = 0.05
BAND = 0.01

# ------------------------------------------------------------------ what is simulated


@dataclass(frozen=True)
class RowDef:
    """One (workload row, metric) of the table and its true effect per arm."""

    workload: str
    metric: str
    level: float  # the baseline's value (a counted row's: its pass or good share)
    noisy: bool = True  # False: an exact row, the same value every round
    effects: tuple[tuple[str, float], ...] = ()  # (arm, true change as a fraction)
    #: a counted row: passes of this many items a round (quality), or with ``share`` the
    #: share of this many requests that were good (goodput); binomial
    items: int = 0
    share: bool = False
    #: a mirror row: the row at this index of the layout, within 0.03% (server timings)
    mirror: int = -1

    def effect(self, arm: str) -> float:
        return dict(self.effects).get(arm, 0.0)


@dataclass(frozen=True)
class Layout:
    """A table: its arms (the first is the baseline) and rows."""

    name: str
    arms: tuple[str, ...]
    rows: tuple[RowDef, ...]

    @property
    def cells(self) -> int:
        return len(self.rows) * (len(self.arms) - 1)


def decode_rows(effects: tuple[tuple[str, float], ...] = ()) -> tuple[RowDef, ...]:
    """decode tok/s at three contexts: they share each server life's level."""
    return tuple(RowDef(f"decode {k}", "decode_tok_s", lvl, effects=effects)
                 for k, lvl in (("32K", 545.0), ("64K", 450.0), ("128K", 330.0)))


VRAM = RowDef("server", "peak_vram_mib", 12480.0, noisy=False)

#: the A/A table: 3 arms x (3 decode rows sharing the life + peak VRAM) = 8 cells
AA = Layout("A/A", ("base", "b", "c"), (*decode_rows(), VRAM))
#: exact rows beside noisy ones, as on the H200 (kv-q8 -40.2% VRAM, -b/-ub 2048 +6.5%)
EXACT = Layout("exact rows", ("base", "kv-q8", "ub2048"), (
    *decode_rows((("kv-q8", -0.15),)),
    RowDef("server", "peak_vram_mib", 12480.0, noisy=False,
           effects=(("kv-q8", 7458 / 12480 - 1), ("ub2048", 13292 / 12480 - 1))),
    RowDef("decode 128K", "misses_per_token", 1024.0, noisy=False),
    RowDef("server", "peak_rss_mib", 2210.0, noisy=False,
           effects=(("kv-q8", -0.003), ("ub2048", 0.005))),
))
#: the users' table (target-report.md): one arm, decode rows +2.8%, peak VRAM equal
USERS = Layout("users", ("base", "pr"), (*decode_rows((("pr", 0.028),)), VRAM))


#: the H200 seed run's contexts (docs/examples/h200-seed-run), decode tok/s of each
H200_DECODE = (("32K", 535.0), ("64K", 445.0), ("128K", 325.0), ("255K", 205.0),
               ("255K + side calls", 170.0))


def h200(pr: str = "pr", decode: tuple[tuple[str, float], ...] = ()) -> Layout:
    """A table shaped like the H200 seed run, one arm against the baseline: its 10
    shown rows (decode at five contexts sharing each life, peak VRAM exact at -40.2%,
    misses/token exact at two contexts, the quality score of 16 items and the quality
    command's 5, both counts), a goodput row (the share of 32 requests meeting the
    SLO, 97% each), and its hidden rows: TTFT and prefill per context, the server's own
    decode timings (mirrors), a side-call latency, peak VRAM per workload (exact,
    equal to the life's) and the device's (exact, a mirror). ``decode``: (context,
    true change of the arm) on decode tok/s."""
    eff = dict(decode)
    rows: list[RowDef] = [RowDef(f"decode {k}", "decode_tok_s", lvl,
                                 effects=((pr, eff[k]),) if k in eff else ())
                          for k, lvl in H200_DECODE]
    vram = ((pr, 7458 / 12480 - 1),)
    rows += [RowDef("server", "peak_vram_mib", 12480.0, noisy=False, effects=vram),
             RowDef("decode 255K", "misses_per_token", 2040.0, noisy=False),
             RowDef("decode 255K + side calls", "misses_per_token", 817.6, noisy=False),
             RowDef("quality", "quality", 0.625, items=16),
             RowDef("quality", "quality_command", 0.8, items=5),
             RowDef("load c=8", "load_goodput", 0.97, items=32, share=True)]
    rows += [RowDef(f"decode {k}", "server_decode_tok_s", lvl, mirror=j)
             for j, (k, lvl) in enumerate(H200_DECODE)]
    rows += [RowDef(f"decode {k}", m, lvl) for k, _ in H200_DECODE
             for m, lvl in (("ttft_ms", 900.0), ("prefill_tok_s", 9000.0))]
    rows += [RowDef("decode 255K + side calls", "side_call_ms", 420.0),
             RowDef("server", "device_vram_mib", 13000.0, noisy=False, effects=vram)]
    rows += [RowDef(f"decode {k}", "peak_vram_mib", 12480.0, noisy=False, effects=vram)
             for k, _ in H200_DECODE]
    return Layout("H200 seed" + (f", {decode}" if decode else ""), ("base", pr), tuple(rows))


def one_cell(effect: float) -> Layout:
    """Two arms, one noisy row (+ an equal exact row, which leaves the family): the
    single comparison the ceiling is about."""
    return Layout("one cell", ("A", "B"), (RowDef("decode 32K", "decode_tok_s", 545.0,
                                                  effects=(("B", effect),)), VRAM))


@dataclass(frozen=True)
class Noise:
    name: str
    sigma: float = 0.01  # sd (log scale) of each arm's per-round value on a noisy row
    shared: float = 0.5  # the share of its variance common to the rows of one server life
    tails: Literal["normal", "t3"] = "normal"
    outlier_p: float = 0.0  # chance that a server life runs slow on every row ...
    outlier: float = 0.10  # ... by this much
    drift: float = 0.0  # across the campaign (across the cap with --until-ci), every arm
    levels: float = 0.0  # bimodal lives: each life at one of two levels this far apart
    #: keep only draws of the levels in which the baseline's lives all sat on one level
    #: and some other arm's all on the other (:func:`study_pattern`; fixed rounds only)
    pattern: bool = False
    short: str = ""

    @property
    def label(self) -> str:
        return self.short or self.name


NORMAL = Noise("normal, 1% per arm", short="normal")
NOISES = (
    NORMAL,
    Noise("t, 3 df, 1% sd per arm", tails="t3", short="t (3 df)"),
    Noise("outliers: 5% of server lives run 10% slow", outlier_p=0.05, short="outliers"),
    Noise("slow drift: +5% across the campaign", drift=0.05, short="drift +5%"),
    Noise("bimodal lives: two levels 9% apart, + normal 1%", levels=0.09, short="bimodal 9%"),
)


def _shape(rng: np.random.Generator, noise: Noise, size: Any) -> np.ndarray:
    if noise.tails == "t3":
        return rng.standard_t(3, size) / math.sqrt(3.0)  # sd 1
    return rng.standard_normal(size)


Values = dict[int, dict[str, dict[int, float]]]  # row index -> arm -> round -> value


def add_slots(rng: np.random.Generator, layout: Layout, noise: Noise, vals: Values,
              arms_rounds: Sequence[tuple[str, int, int]], total_slots: int) -> None:
    """Draw the values of these slots ((arm, round, slot index) in time order)."""
    k = len(arms_rounds)
    life = math.sqrt(noise.shared) * noise.sigma * _shape(rng, noise, k)
    if noise.levels:
        level = rng.integers(0, 2, k)
        while noise.pattern and not _pattern(level, arms_rounds, layout.arms[0]):
            level = rng.integers(0, 2, k)
        life = life + math.log1p(noise.levels) * level
    if noise.outlier_p:
        life = life + math.log1p(-noise.outlier) * (rng.random(k) < noise.outlier_p)
    own = math.sqrt(1 - noise.shared) * noise.sigma * _shape(rng, noise, (k, len(layout.rows)))
    for s, (arm, rnd, index) in enumerate(arms_rounds):
        drift = math.log1p(noise.drift) * index / max(1, total_slots - 1)
        for j, rd in enumerate(layout.rows):
            if rd.items:
                q = min(1.0, rd.level * (1 + rd.effect(arm)))
                hits = float(rng.binomial(rd.items, q))
                v = hits / rd.items if rd.share else hits
            elif rd.mirror >= 0:
                v = vals[rd.mirror][arm][rnd] * math.exp(0.0003 * own[s, j])
            elif rd.noisy:
                v = rd.level * math.exp(math.log1p(rd.effect(arm)) + drift + life[s] + own[s, j])
            else:
                v = rd.level * (1 + rd.effect(arm))  # the same every round
            vals[j][arm][rnd] = v


def _pattern(level: np.ndarray, arms_rounds: Sequence[tuple[str, int, int]], base: str) -> bool:
    by_arm: dict[str, set[int]] = {}
    for lv, (arm, _r, _i) in zip(level, arms_rounds, strict=True):
        by_arm.setdefault(arm, set()).add(int(lv))
    b = by_arm.pop(base)
    return len(b) == 1 and any(len(v) == 1 and v != b for v in by_arm.values())


def table_rows(layout: Layout, vals: Values) -> list[Row]:
    """The rows table_of would make from these values (one rep per slot)."""
    out = []
    for j, rd in enumerate(layout.rows):
        cells = {}
        for arm in layout.arms:
            rs = sorted(vals[j][arm])
            cells[arm] = Cell(arm, rs, [vals[j][arm][r] for r in rs])
        row = Row(RowKey(rd.workload, rd.metric), spec(rd.metric), cells)
        if rd.items and not rd.share:  # a score: its items per round
            row.totals = {arm: {r: float(rd.items) for r in vals[j][arm]}
                          for arm in layout.arms}
            row.baseline = layout.arms[0]
        out.append(row)
    return out


def records(layout: Layout, rows: list[Row]) -> list[dict[str, Any]]:
    """A campaign's values as stored sample records (one rep per slot), for
    table_of: the tests check it gives the same table."""
    return [{"type": "sample", "valid": True, "arm": arm, "round": rnd,
             "workload": rd.workload, "metrics": {rd.metric: v}}
            for rd, row in zip(layout.rows, rows, strict=True)
            for arm, cell in row.cells.items()
            for rnd, v in zip(cell.rounds, cell.values, strict=True)]


def meta(layout: Layout) -> dict[str, Any]:
    return {"id": "sim", "arms": [{"name": a} for a in layout.arms], "order": "interleaved"}


# ------------------------------------------------------------------ the code under test


@dataclass
class Outcome:
    n: int
    rows: list[Row]
    layout: Layout

    def cells(self) -> Iterator[tuple[RowDef, str, Comparison]]:
        base = self.layout.arms[0]
        for rd, row in zip(self.layout.rows, self.rows, strict=True):
            for arm, cell in row.cells.items():
                if arm != base and cell.comparison is not None:
                    yield rd, arm, cell.comparison


def compared(layout: Layout, vals: Values, settings: StatsConfig) -> list[Row]:
    """The table compute_table makes: the rows it shows (the default ``table:``) one
    family, the rest another."""
    rows = table_rows(layout, vals)
    shown = {id(r) for r in pick_rows(rows, TableConfig())}
    compare_rows(rows, layout.arms[0], settings=settings, shown=shown)
    return rows


def _watched(layout: Layout, rows: list[Row], settings: StatsConfig) -> list[Comparison | None]:
    """The cells --until-ci watches: those of the rows the table shows (the default
    ``table:``), as abbench.campaign.until_ci.watched_comparisons picks them."""
    return [cell.comparison for row in pick_rows(rows, TableConfig()) if not row.spec.denominator
            for arm, cell in row.cells.items() if arm != layout.arms[0]]


DECIDED = ("changed", "within_noise")
HELD = "outlier rounds in d"  # the start of compare()'s cross-check warning


def campaign(rng: np.random.Generator, layout: Layout, noise: Noise, rounds: int, *,
             order: Order = "interleaved", until: float | None = None,
             cap: int | None = None) -> Outcome:
    """One campaign of ``rounds`` planned rounds; with ``until`` the --until-ci loop of
    abbench.campaign.until_ci (its stop rule, cap, per-look alphas and blocks)."""
    arms = list(layout.arms)
    seed = int(rng.integers(1, 2**31))
    settings = StatsConfig(alpha=ALPHA, noise_band=BAND, until_ci=until, max_rounds=cap)
    limit = max_rounds(settings, rounds) if until is not None else rounds
    total = limit * len(arms)
    vals: Values = {j: {a: {} for a in arms} for j in range(len(layout.rows))}
    slots = make_schedule(arms, rounds, order, seed)
    add_slots(rng, layout, noise, vals, [(s.arm, s.round, s.index) for s in slots], total)
    done, used = rounds, len(slots)
    if until is None:
        return Outcome(done, compared(layout, vals, settings), layout)
    looks = len(planned_looks(done, limit, len(arms)))
    alpha_k, alpha_end = look_alphas(settings, looks)
    spent_settings = settings.model_copy(update={"alpha": alpha_k})
    end_settings = settings.model_copy(update={"alpha": alpha_end})
    taken = 0
    while True:
        taken += 1
        rows = compared(layout, vals, end_settings)
        nominal = _watched(layout, rows, end_settings)
        # A verdict at alpha_k implies one at alpha, except where compare()'s outlier
        # cross-check held a cell back at alpha: only then can the second pass matter.
        spent: list[Comparison | None] = []
        spent_rows: list[Row] = []
        if all(c is not None and (c.verdict in DECIDED or any(w.startswith(HELD)
                                                              for w in c.warnings))
               for c in nominal):
            spent_rows = compared(layout, vals, spent_settings)
            spent = _watched(layout, spent_rows, spent_settings)
        reason = stop_reason(nominal, spent, target=until, rounds_done=done, cap=limit)
        if reason:
            # the report's verdicts at abbench.stats.stopping.report_alpha: the per-look
            # alpha after a stop on verdicts, else alpha less the looks taken
            if reason == ON_VERDICTS:
                return Outcome(done, spent_rows, layout)
            at = report_alpha(settings, alpha_k, reason, taken - (done >= limit))
            if at == alpha_end:
                return Outcome(done, rows, layout)
            return Outcome(done, compared(layout, vals,
                                          settings.model_copy(update={"alpha": at})), layout)
        add = min(block_size(done, len(arms)), limit - done)
        block = make_schedule(arms, add, order, seed, first_round=done, first_index=used)
        add_slots(rng, layout, noise, vals, [(s.arm, s.round, s.index) for s in block], total)
        used += len(block)
        done += add


# ------------------------------------------------------------------ faster equivalents

@functools.lru_cache(maxsize=4096)
def _tied_wilcoxon_p(key: bytes) -> float:
    return _ORIGINAL["wilcoxon_p"](np.frombuffer(key))


def wilcoxon_p(x: np.ndarray) -> float:
    """paired.wilcoxon_p, remembered where d has ties or zeros: scipy then runs a
    permutation test (2.7 s for an exact row of 12 rounds), and an exact row gives the
    same d in every campaign."""
    a = np.abs(x)
    if x.size >= 2 and (x.size > 50 or np.any(a == 0) or np.unique(a).size < x.size):
        return _tied_wilcoxon_p(np.ascontiguousarray(x, dtype=float).tobytes())
    return _ORIGINAL["wilcoxon_p"](x)


def outlier_rounds(rounds: Sequence[int], values: Sequence[float], *, floor: float = 0.0,
                   relative: bool = False) -> list[int]:
    """paired.outlier_rounds in plain Python: the same medians, MAD and z-scores, step
    for step (numpy's median of an even count is the mean of the middle two, as here)."""
    if len(values) < 5:
        return []
    a = [float(v) for v in values]
    med = _median(a)
    dev = [abs(x - med) for x in a]
    mad = _median(dev)
    z = [0.6745 * (x - med) / mad for x in a] if mad != 0 else [0.0] * len(a)
    if relative and med != 0:
        dev = [d / abs(med) for d in dev]
    return [r for r, zi, dv in zip(rounds, z, dev, strict=True)
            if abs(zi) > paired.OUTLIER_Z and dv > floor]


def _median(a: list[float]) -> float:
    s = sorted(a)
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def drift(rounds: Sequence[int], values: Sequence[float]) -> float | None:
    """paired.drift with the least-squares slope in closed form instead of np.polyfit
    (equal to ~1e-12; the drift feeds a warning only, never a verdict)."""
    if len(values) < 3 or min(values) <= 0 or len(set(rounds)) < 2:
        return None
    x = [float(r) for r in rounds]
    y = [math.log(v) for v in values]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) \
        / sum((a - mx) ** 2 for a in x)
    return math.expm1(slope * (max(rounds) - min(rounds)))


@functools.lru_cache(maxsize=64)
def _walsh_index(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i, j = np.triu_indices(n)
    return i, j, np.cumsum(paired.signed_rank_null(n))


@functools.lru_cache(maxsize=256)
def _hl_rank(n: int, alpha: float) -> int | None:
    ok = np.nonzero(_walsh_index(n)[2] <= alpha / 2 + 1e-12)[0]
    return int(ok[-1]) if ok.size else None


def wilcoxon_hl(d: Sequence[float] | np.ndarray, alpha: float = 0.05) -> paired.WilcoxonResult:
    """paired.wilcoxon_hl with the index arrays and the null's cumulative sums kept per
    n, and the median of the sorted Walsh averages read off directly (numpy's median
    of an even count is the mean of the middle two, as here)."""
    x = np.asarray(d, dtype=float)
    n = x.size
    i, j, _cdf = _walsh_index(n)
    walsh = np.sort((x[i] + x[j]) / 2)
    m = walsh.size
    if m == 0:
        hl = math.nan
    elif m % 2:
        hl = float(walsh[m // 2])
    else:
        hl = float((walsh[m // 2 - 1] + walsh[m // 2]) / 2)
    if n < 1 or np.all(x == 0):
        return paired.WilcoxonResult(hl, -math.inf, math.inf, 1.0)
    c = _hl_rank(n, alpha)
    if c is None:
        lo, hi = -math.inf, math.inf
    else:
        lo, hi = float(walsh[c]), float(walsh[m - 1 - c])
    return paired.WilcoxonResult(hl, lo, hi, paired.wilcoxon_p(x))


def cv(values: Sequence[float]) -> float:
    """paired.cv in plain Python (equal to ~1e-15; it feeds a warning only)."""
    a = [float(v) for v in values]
    if len(a) < 2:
        return 0.0
    mean = sum(a) / len(a)
    if mean == 0:
        return 0.0
    return math.sqrt(sum((v - mean) ** 2 for v in a) / (len(a) - 1)) / abs(mean)


class _T:
    """scipy.stats.t's sf and ppf without the argument handling around them: the same
    special functions (scipy's t_gen._sf and _ppf), a tenth of the cost."""

    @staticmethod
    def sf(x: float, df: float) -> float:
        return float(sc.stdtr(df, -x))

    @staticmethod
    def ppf(q: float, df: Any) -> Any:
        return sps.t.ppf(q, df) if np.ndim(df) else _t_ppf(q, df)


@functools.lru_cache(maxsize=4096)
def _t_ppf(q: float, df: float) -> float:
    return float(sc.stdtrit(df, q))


class _Stats:
    """What abbench.stats.paired calls scipy.stats for, with :class:`_T` as ``t``."""

    t = _T

    def __getattr__(self, name: str) -> Any:
        return getattr(sps, name)


_ORIGINAL: dict[str, Callable[..., Any]] = {"wilcoxon_p": paired.wilcoxon_p}
_FAST: dict[str, Any] = {"wilcoxon_p": wilcoxon_p,
                         "outlier_rounds": outlier_rounds, "drift": drift, "cv": cv,
                         "wilcoxon_hl": wilcoxon_hl, "sps": _Stats()}


@contextlib.contextmanager
def fast_paths() -> Iterator[None]:
    """While a study runs: the faster equivalents in abbench.stats.paired (each gives
    the same numbers; tests/unit/test_simulate.py checks)."""
    saved = {k: getattr(paired, k) for k in _FAST}
    for k, v in _FAST.items():
        setattr(paired, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(paired, k, v)


# ------------------------------------------------------------------ bounds


def ceiling(effect: float, sigma_d: float, n: int, alpha: float = ALPHA,
            band: float = BAND) -> float:
    """The most often any honest procedure can call the effect "changed" with n rounds.

    "changed" claims |effect| > band; an honest claim is a level-alpha test of
    |effect| <= band, so also of the simple hypothesis effect = band (the edge). By
    Neyman-Pearson no level-alpha test of that, even one that knows the noise (sd
    ``sigma_d`` of the per-round log-ratio) and the drift, is more powerful against
    this effect than the one-sided z test on the mean log-ratio, with se sigma_d /
    sqrt(n). Estimating the noise, stopping early or a two-sided interval only lose."""
    se = sigma_d / math.sqrt(n)
    return float(sps.norm.cdf((abs(math.log1p(effect)) - math.log1p(band)) / se
                              - sps.norm.ppf(1 - alpha)))


def t_ceiling(effect: float, sigma_d: float, n: int, alpha: float = ALPHA,
              band: float = BAND) -> float:
    """The same bound for a procedure that must estimate the noise from the n rounds
    (as abbench must): the power of the one-sided t test at the band's edge, the most
    powerful test whose answer does not depend on the scale of the noise (noncentral t)."""
    df = n - 1
    delta = (abs(math.log1p(effect)) - math.log1p(band)) / (sigma_d / math.sqrt(n))
    return float(sps.nct.sf(sps.t.ppf(1 - alpha, df), df, delta))


# ------------------------------------------------------------------ studies


def rng_for(seed: int, *key: Any) -> np.random.Generator:
    """A generator for one scenario: the same numbers whatever else runs, in any order."""
    return np.random.default_rng([seed, zlib.crc32(repr(key).encode())])


def run_campaigns(campaigns: int, seed: int, layout: Layout, noise: Noise,
                  rounds: int, **kw: Any) -> list[Outcome]:
    rng = rng_for(seed, layout, noise, rounds, sorted(kw.items()))
    with fast_paths():
        return [campaign(rng, layout, noise, rounds, **kw) for _ in range(campaigns)]


Cells = list[tuple[RowDef, str, Comparison]]
Final = tuple[int, Cells]  # the rounds a campaign ran, its final table's cells


def finals(campaigns: int, seed: int, layout: Layout, noise: Noise, rounds: int,
           **kw: Any) -> list[Final]:
    """Each campaign's final table: its rounds and cells."""
    return [(o.n, list(o.cells()))
            for o in run_campaigns(campaigns, seed, layout, noise, rounds, **kw)]


def false_changed(cells: Cells) -> bool:
    """A "changed" where the truth is within the band, or of the wrong sign."""
    for rd, arm, c in cells:
        if c.verdict != "changed":
            continue
        e = rd.effect(arm)
        if abs(math.log1p(e)) <= math.log1p(BAND) or (c.change or 0.0) * e <= 0:
            return True
    return False


def right(rd: RowDef, arm: str, c: Comparison) -> bool:
    """The verdict the truth calls for: changed with the right sign beyond the band,
    within noise inside it."""
    e = rd.effect(arm)
    if abs(math.log1p(e)) > math.log1p(BAND):
        return c.verdict == "changed" and (c.change or 0.0) * e > 0
    return c.verdict == "within_noise"


def share(xs: Sequence[bool]) -> float:
    return float(np.mean(xs)) if len(xs) else math.nan


# ------------------------------------------------------------------ the studies


@dataclass(frozen=True)
class Scenario:
    """A single comparison (two arms, one noisy row), as the ceiling is about."""

    name: str
    effect: float
    rounds: int  # planned rounds (the first look with --until-ci)
    sigma: float = 0.01  # of each arm's per-round value
    drift: float = 0.05  # across the campaign (the cap with --until-ci)
    order: Order = "interleaved"
    until: float | None = None
    cap: int | None = None
    goal: str = ""
    #: campaigns, as a multiple of --campaigns (default: 3 at fixed rounds, 1.25 with
    #: --until-ci)
    weight: float = 0.0

    @property
    def noise(self) -> Noise:
        return Noise(f"normal {self.sigma:g}, drift {self.drift:g}", sigma=self.sigma,
                     drift=self.drift)

    @property
    def n_max(self) -> int:
        return self.cap or self.rounds


LEVEL = "changed <= 5% (the level at the band's edge)"
NEAR = "within 5 points of the ceiling"
SCENARIOS = (
    # kept from the first study (drift +5%)
    Scenario("A/A, 10 rounds", 0.0, 10, goal="t p < 0.05 ~ 5%; changed <= 5%; covers >= 88%"),
    Scenario("A/A, sequential (AABB), 10 rounds", 0.0, 10, order="sequential",
             goal="shows the bias of running A then B"),
    Scenario("A/A, --until-ci 1%, cap 12", 0.0, 6, until=0.01, cap=12,
             goal="changed <= 5%; covers >= 88%"),
    Scenario("+2%, --until-ci 1%, cap 12", 0.02, 6, until=0.01, cap=12),
    Scenario("+2%, log-ratio sd 1% (0.71% per arm), --until-ci 0.5%, cap 12", 0.02, 6,
             sigma=0.01 / math.sqrt(2), until=0.005, cap=12, goal=">= 80% within 12 rounds"),
    Scenario("A/A, log-ratio sd 1% (0.71% per arm), --until-ci 0.5%, cap 12", 0.0, 6,
             sigma=0.01 / math.sqrt(2), until=0.005, cap=12, goal="changed <= 5%"),
    # the power goal (1% per arm, no drift) ...
    Scenario("+2%, 12 rounds, no drift", 0.02, 12, drift=0.0, goal=NEAR),
    Scenario("+2%, 24 rounds, no drift", 0.02, 24, drift=0.0, goal=NEAR),
    Scenario("+2%, --until-ci 0.5%, cap 12, no drift", 0.02, 6, drift=0.0, until=0.005,
             cap=12, goal=NEAR),
    Scenario("+2%, --until-ci 0.5%, cap 24, no drift", 0.02, 6, drift=0.0, until=0.005,
             cap=24, goal=NEAR),
    # ... and the other side of it: at the band's edge "changed" is a false claim
    Scenario("+1% (the band's edge), 4 rounds, no drift", 0.01, 4, drift=0.0, goal=LEVEL),
    Scenario("+1% (the band's edge), 12 rounds, no drift", 0.01, 12, drift=0.0, goal=LEVEL),
    Scenario("+1% (the band's edge), --until-ci 0.5%, cap 12, no drift", 0.01, 6, drift=0.0,
             until=0.005, cap=12, goal=LEVEL, weight=3),
    Scenario("+1% (the band's edge), --until-ci 0.5%, cap 24, no drift", 0.01, 6, drift=0.0,
             until=0.005, cap=24, goal=LEVEL, weight=3),
)


@dataclass
class ScenarioResult:
    sc: Scenario
    rounds_mean: float
    rounds_max: int
    t_p: float
    changed: float
    right_sign: float
    within: float
    inconclusive: float
    coverage: float
    campaigns: int


def study_scenario(sc: Scenario, campaigns: int, seed: int) -> ScenarioResult:
    layout = one_cell(sc.effect)
    got = finals(campaigns, seed, layout, sc.noise, sc.rounds, order=sc.order,
                 until=sc.until, cap=sc.cap)
    truth = sc.effect

    def noisy(cells: Cells) -> Comparison:
        return next(c for rd, _arm, c in cells if rd.noisy)

    cur = [noisy(cells) for _n, cells in got]
    ns = [n for n, _cells in got]
    return ScenarioResult(
        sc=sc, rounds_mean=float(np.mean(ns)), rounds_max=max(ns),
        t_p=share([c.t_p is not None and c.t_p < ALPHA for c in cur]),
        changed=share([c.verdict == "changed" for c in cur]),
        right_sign=share([c.verdict == "changed" and truth != 0
                          and (c.change or 0.0) * truth > 0 for c in cur]),
        within=share([c.verdict == "within_noise" for c in cur]),
        inconclusive=share([c.verdict == "inconclusive" for c in cur]),
        coverage=share([c.lo is not None and c.hi is not None and c.lo <= truth <= c.hi
                        for c in cur]), campaigns=campaigns)


#: the users' case: +2.8% at 0.5% "per-round sd", read both ways
READINGS = (("sd of each arm's per-round value", 0.005),
            ("sd of the per-round log-ratio", 0.005 / math.sqrt(2)))


def study_users(campaigns: int, seed: int) -> dict[tuple[str, int], tuple[float, float]]:
    """Share of campaigns with decode 128K changed (right sign), and with all three."""
    out = {}
    for reading, sigma in READINGS:
        noise = Noise(reading, sigma=sigma)
        for n in range(2, 7):
            got = finals(campaigns, seed, USERS, noise, n)
            one = [next(right(rd, a, c) for rd, a, c in cells if rd.workload == "decode 128K"
                        and rd.noisy) for _n, cells in got]
            allr = [all(right(rd, a, c) for rd, a, c in cells if rd.noisy) for _n, cells in got]
            out[reading, n] = (share(one), share(allr))
    return out


def study_exact(campaigns: int, seed: int, ns: Sequence[int]
                ) -> dict[tuple[str, int], tuple[float, float]]:
    """Exact cells: the share decided right, and the share compare() flags exact."""
    out = {}
    for noise in NOISES:
        for n in ns:
            got = finals(campaigns, seed, EXACT, noise, n)
            ex = [(rd, a, c) for _n, cells in got for rd, a, c in cells if not rd.noisy]
            out[noise.label, n] = (share([right(rd, a, c) for rd, a, c in ex]),
                                   share([c.exact for _rd, _a, c in ex]))
    return out


def study_aa(campaigns: Callable[[Noise, int], int], seed: int, ns: Sequence[int], *,
             until: float | None = None, cap: int = 24
             ) -> dict[tuple[str, int], tuple[float, float]]:
    """Share of A/A tables with any false "changed", and the mean rounds run."""
    out = {}
    for noise in NOISES:
        for n in ns:
            kw: dict[str, Any] = {"until": until, "cap": cap} if until is not None else {}
            got = finals(campaigns(noise, n), seed, AA, noise, n, **kw)
            out[noise.label, n] = (share([false_changed(c) for _n, c in got]),
                                   float(np.mean([k for k, _c in got])))
    return out


def pattern_p(n: int, arms: int = 3) -> float:
    """The chance, with n rounds of bimodal lives (each level equally likely), that the
    baseline's lives all sat on one level and some other arm's all on the other:
    2 x (1/2)^n x (1 - (1 - (1/2)^n)^(arms - 1)); 7/32 at 2 rounds, 3 arms."""
    one = 0.5**n
    return 2 * one * (1 - (1 - one) ** (arms - 1))


@contextlib.contextmanager
def whole_level() -> Iterator[None]:
    """abbench as it was before it tested 2-round cells at half the level: every cell
    at the whole level (``decide.FEW_ROUNDS_SHARE`` emptied while it runs)."""
    saved = dict(decide.FEW_ROUNDS_SHARE)
    decide.FEW_ROUNDS_SHARE.clear()
    try:
        yield
    finally:
        decide.FEW_ROUNDS_SHARE.update(saved)


def hidden_pattern_p(n: int, arms: int = 3) -> float:
    """The chance of the pattern with no arm's lives on both levels, the data no
    procedure can tell from a real change: every arm's n lives on one level, the
    baseline's on one, some other arm's on the other: 2 (1/2)^n x (2 (1/2)^n)^(arms - 1)
    x (1 - (1/2)^(arms - 1)); 3/256 at 3 rounds, 3 arms."""
    one = 2 * 0.5**n
    return one * one ** (arms - 1) * (1 - 0.5 ** (arms - 1))


@contextlib.contextmanager
def without_lives() -> Iterator[None]:
    """abbench as it was before it looked at the table's server lives: no cell tested
    with the two-level sd (``cells.lives_gap`` answers None while it runs)."""
    saved = cells_mod.lives_gap
    cells_mod.lives_gap = lambda _lives: None
    try:
        yield
    finally:
        cells_mod.lives_gap = saved


def study_pattern(campaigns: int, seed: int, n: int) -> tuple[float, float, float]:
    """Bimodal A/A tables of n rounds in which the pattern happened: the data a real 9%
    change of an arm, seen in every round, gives on that arm and the baseline. How often
    abbench says "changed" there; without the table's lives (:func:`without_lives`, the
    tenth pass); and with neither those nor half the level at 2 rounds
    (:func:`whole_level`, the ninth). A procedure that reads only the two arms has an A/A
    rate under bimodal lives of at least pattern_p(n) times its figure; one that reads
    the whole table can tell the pattern from a change where another arm has lives on
    both levels, and is bound only on hidden_pattern_p(n)."""
    bimodal = replace(next(nz for nz in NOISES if nz.levels), pattern=True)
    got = finals(campaigns, seed, AA, bimodal, n)
    with without_lives():
        tenth = finals(campaigns, seed, AA, bimodal, n)
        with whole_level():
            whole = finals(campaigns, seed, AA, bimodal, n)
    return (share([false_changed(cells) for _n, cells in got]),
            share([false_changed(cells) for _n, cells in tenth]),
            share([false_changed(cells) for _n, cells in whole]))


# ------------------------------------------------------------------ tables like the H200's

#: the noise models of the H200-shaped tables: 1-3% per arm (docs/noise.md measures 2-3%
#: at 32K on the H200), bimodal lives, drift
TABLE_NOISES = (
    Noise("normal, 1% per arm", short="1%"),
    Noise("normal, 2% per arm", sigma=0.02, short="2%"),
    Noise("normal, 3% per arm", sigma=0.03, short="3%"),
    Noise("bimodal lives 9% apart + 1%", levels=0.09, short="bimodal 9%"),
    Noise("drift +5% + 1%", drift=0.05, short="drift +5%"),
)
TABLE_NS = (2, 3, 4, 6, 8, 12, 16, 24)


def grow(rng: np.random.Generator, layout: Layout, noise: Noise, rounds: int,
         horizon: int = 0) -> Generator[tuple[int, list[Row]], Sequence[int] | None, None]:
    """One fixed-rounds campaign of ``rounds`` rounds, its table first; then, given
    (``send``) rounds in all to carry on to, the same campaign's table at each, in
    ascending order. ``horizon``: the rounds the drift spans (default ``rounds``). The
    rounds carried on to are drawn one round at a time from a stream of the campaign's
    own: the same values whatever rounds are asked for, and ``rng`` gives the next
    campaign the same start (two rules of the rounds to decide, which ask for different
    rounds, are compared on the same campaigns)."""
    arms = list(layout.arms)
    seed = int(rng.integers(1, 2**31))
    settings = StatsConfig(alpha=ALPHA, noise_band=BAND)
    total = max(rounds, horizon) * len(arms)
    vals: Values = {j: {a: {} for a in arms} for j in range(len(layout.rows))}
    slots = make_schedule(arms, rounds, "interleaved", seed)
    add_slots(rng, layout, noise, vals, [(s.arm, s.round, s.index) for s in slots], total)
    done, used = rounds, len(slots)
    more = yield done, compared(layout, vals, settings)
    later = np.random.default_rng([seed, 1])
    for target in sorted(set(more or ())):
        if target <= done:
            continue
        for r in range(done, target):
            block = make_schedule(arms, 1, "interleaved", seed, first_round=r, first_index=used)
            add_slots(later, layout, noise, vals, [(s.arm, s.round, s.index) for s in block],
                      total)
            used += len(block)
        done = target
        yield done, compared(layout, vals, settings)


def _cells(layout: Layout, rows: list[Row]) -> Cells:
    return list(Outcome(0, rows, layout).cells())


def study_tables_aa(campaigns: Callable[[int], int], seed: int
                    ) -> dict[tuple[str, int], tuple[float, float, float]]:
    """H200-shaped tables whose only real changes are the exact memory rows (-40.2%):
    the share with any false "changed" (shown or hidden), the share with one among the
    shown rows, and the share of exact cells decided right."""
    out = {}
    with fast_paths():
        for noise in TABLE_NOISES:
            for n in TABLE_NS:
                got = aa_tables(campaigns(n), rng_for(seed, "tables A/A", noise, n), noise, n)
                shown = [[(rd, a, c) for rd, a, c in cells if c.family in ("table", "counts")]
                         for cells in got]
                exact = [right(rd, a, c) for cells in got for rd, a, c in cells if c.exact]
                out[noise.label, n] = (share([false_changed(c) for c in got]),
                                       share([false_changed(c) for c in shown]), share(exact))
    return out


def aa_tables(campaigns: int, rng: np.random.Generator, noise: Noise, n: int,
              arms: int = 2) -> list[Cells]:
    """The cells of ``campaigns`` H200-shaped A/A tables (the exact memory rows the only
    change) at ``n`` rounds; ``arms`` past 2 adds arms beside the first, each an A/A
    in every row, memory included (the H200 seed run had three)."""
    layout = h200()
    if arms > 2:
        layout = replace(layout, arms=(*layout.arms, *(f"pr{i}" for i in range(2, arms))))
    return [_cells(layout, next(grow(rng, layout, noise, n))[1]) for _ in range(campaigns)]


POWER_NS = (4, 6, 12, 24)


def study_tables_power(campaigns: int, seed: int) -> dict[tuple[str, int], float]:
    """An isolated +2% on decode 128K at 1% per arm: how often it is called "changed"
    in the H200-shaped table, and in a table of that one cell."""
    out = {}
    layouts = (("H200-shaped table", h200(decode=(("128K", 0.02),))),
               ("one cell", one_cell(0.02)))
    with fast_paths():
        for name, layout in layouts:
            for n in POWER_NS:
                out[name, n] = power_at(campaigns, rng_for(seed, "tables power", name, n),
                                        layout, n)
    return out


def power_at(campaigns: int, rng: np.random.Generator, layout: Layout, n: int) -> float:
    """Share of ``campaigns`` at ``n`` rounds calling the layout's planted decode change
    "changed" with the right sign."""
    hit = []
    for _ in range(campaigns):
        cells = _cells(layout, next(grow(rng, layout, NORMAL, n))[1])
        hit.append(any(c.verdict == "changed" and (c.change or 0) > 0
                       for rd, _a, c in cells if rd.effect(layout.arms[1]) > 0
                       and rd.metric == "decode_tok_s"))
    return share(hit)


#: rounds to decide: the campaigns' starting rounds. Every stated k is followed, up to
#: MANY_ROUNDS rounds in all (past it a cell says "needs >1000 rounds", no k)
RTD_NS = (3, 6)
#: the rounds the drift scenario's +5% spans (past them it goes on at that rate)
RTD_DRIFT = 40
#: the ranges of k the share decided is also shown by
RTD_BINS = ((1, 5), (6, 15), (16, 40), (41, 100), (101, 200), (201, MANY_ROUNDS))


@dataclass(frozen=True)
class Followed:
    """The undecided cells of one scenario and n: (k stated, decided at n + k) for each
    cell that states a k, and how many cells were undecided; ``campaigns``: how many of
    those cells each campaign gave, in order (its cells move together); ``metrics``:
    each cell's metric, in the order of ``cells``."""

    cells: tuple[tuple[int, bool], ...]
    undecided: int
    campaigns: tuple[int, ...] = ()
    metrics: tuple[str, ...] = ()

    @property
    def decided(self) -> float:
        return share([d for _k, d in self.cells])

    @property
    def se(self) -> float:
        """The standard error of :attr:`decided` over campaigns (a ratio estimator:
        the cells of one campaign share its server lives, so they are not
        independent); nan below two campaigns with cells."""
        got, at = [], 0
        for size in self.campaigns:
            got.append((sum(d for _k, d in self.cells[at:at + size]), size))
            at += size
        got = [(d, c) for d, c in got if c]
        if len(got) < 2:
            return math.nan
        p = self.decided
        mean = sum(c for _d, c in got) / len(got)
        var = sum((d - p * c) ** 2 for d, c in got) / (len(got) - 1)
        return math.sqrt(var / len(got)) / mean

    @property
    def stated(self) -> float:
        return len(self.cells) / self.undecided if self.undecided else math.nan


def rounds_scenarios() -> list[tuple[str, Layout, Noise]]:
    return [*[(nz.label, h200(), nz) for nz in TABLE_NOISES],
            ("+2% on decode 128K, 1%", h200(decode=(("128K", 0.02),)), NORMAL)]


def study_rounds(campaigns: int, seed: int, ns: Sequence[int] = RTD_NS
                 ) -> dict[tuple[str, int], Followed]:
    """Every undecided cell that says "about k more rounds (80%)": the campaign carried
    on to n + k rounds, is the cell decided there?"""
    out = {}
    with fast_paths():
        for label, layout, noise in rounds_scenarios():
            for n in ns:
                rng = rng_for(seed, "rounds", label, n)
                followed: list[tuple[int, bool]] = []
                metrics: list[str] = []
                sizes: list[int] = []
                undecided = 0
                for _ in range(campaigns):
                    sizes.append(len(followed))
                    want: dict[int, list[tuple[str, str, str]]] = {}
                    it = grow(rng, layout, noise, n, horizon=RTD_DRIFT)
                    _n0, rows = next(it)
                    for row in rows:
                        for arm, cell in row.cells.items():
                            c = cell.comparison
                            if arm == layout.arms[0] or c is None or c.verdict in DECIDED:
                                continue
                            undecided += 1
                            if c.rounds_needed is not None and c.rounds_needed <= MANY_ROUNDS:
                                want.setdefault(c.rounds_needed, []).append(
                                    (row.workload, row.metric, arm))
                    if not want:
                        it.close()
                        continue
                    with contextlib.suppress(StopIteration):
                        got = it.send(sorted(want))
                        while True:
                            big_n, rows_n = got
                            by = {(r.workload, r.metric, a): cell.comparison
                                  for r in rows_n for a, cell in r.cells.items()}
                            for key in want.get(big_n, []):
                                cn = by.get(key)
                                followed.append((big_n - n,
                                                 cn is not None and cn.verdict in DECIDED))
                                metrics.append(key[1])
                            got = next(it)
                sizes.append(len(followed))
                out[label, n] = Followed(tuple(followed), undecided,
                                         tuple(b - a for a, b in itertools.pairwise(sizes)),
                                         tuple(metrics))
    return out


# ------------------------------------------------------------------ the tables


def _pc(x: float, digits: int = 1) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x * 100:.{digits}f}%"


def _se(campaigns: int, p: float = 0.05) -> str:
    return _pc(math.sqrt(p * (1 - p) / campaigns))


@dataclass
class Counts:
    """Campaigns per scenario in each study, from --campaigns (default 1000)."""

    base: int

    def single(self, sc: Scenario) -> int:
        return max(10, int(self.base * (sc.weight or (3 if sc.until is None else 1.25))))

    @property
    def users(self) -> int:
        return self.base

    def aa_fixed(self, noise: Noise, n: int) -> int:
        """More where the rate is near 5% (bimodal lives, few rounds)."""
        if noise.levels and n <= 4:
            return max(20, self.base * 3 // 2)
        return max(20, self.base * 3 // 10 if n <= 8 else self.base // 10)

    @property
    def aa_until(self) -> int:
        return max(10, self.base // 20)

    def aa_until_of(self, noise: Noise, n: int) -> int:
        return self.aa_until

    def tables_aa(self, n: int) -> int:
        """H200-shaped A/A tables: more at few rounds, where the rates are highest."""
        return max(10, self.base * 3 // 10 if n <= 4 else self.base // 10)

    @property
    def tables_power(self) -> int:
        return max(10, self.base * 3 // 5)

    @property
    def rounds(self) -> int:
        return max(4, self.base // 25)

    @property
    def exact(self) -> int:
        return max(5, self.base // 20)

    @property
    def pattern(self) -> int:
        return self.base


def render_aa(res: dict[tuple[str, int], tuple[float, float]], ns: Sequence[int],
              counts: Callable[[Noise, int], int], until: bool) -> str:
    head = "| planned rounds | " if until else "| rounds | "
    lines = [head + " | ".join(nz.label for nz in NOISES) + " | campaigns |",
             "|---|" + "---|" * (len(NOISES) + 1)]
    for n in ns:
        cells = []
        for nz in NOISES:
            rate = _pc(res[nz.label, n][0])
            if until:
                rate += f" ({res[nz.label, n][1]:.1f})"
            cells.append(rate)
        k = {counts(nz, n) for nz in NOISES}
        many = "" if len(k) == 1 else " (" + ", ".join(
            f"{nz.label} {counts(nz, n)}" for nz in NOISES if counts(nz, n) != min(k)) + ")"
        lines.append(f"| {n} | " + " | ".join(cells) + f" | {min(k)}{many} |")
    return "\n".join(lines)


def render_exact(res: dict[tuple[str, int], tuple[float, float]], ns: Sequence[int],
                 campaigns: int) -> str:
    lines = ["| rounds | " + " | ".join(nz.label for nz in NOISES)
             + " | flagged exact | campaigns |", "|---|" + "---|" * (len(NOISES) + 2)]
    for n in ns:
        cells = [_pc(res[nz.label, n][0]) for nz in NOISES]
        flagged = _pc(res[NOISES[0].label, n][1])
        lines.append(f"| {n} | " + " | ".join(cells) + f" | {flagged} | {campaigns} |")
    return "\n".join(lines)


def render_users(res: dict[tuple[str, int], tuple[float, float]]) -> str:
    lines = ["| rounds | " + " | ".join(
        f"{r}: decode 128K changed | all three rows | ceiling | t ceiling"
        for r, _s in READINGS) + " |", "|---|" + "---|" * (4 * len(READINGS))]
    for n in range(2, 7):
        parts = []
        for reading, sigma in READINGS:
            sd_d = sigma * math.sqrt(2)
            parts += [_pc(res[reading, n][0]), _pc(res[reading, n][1]),
                      _pc(ceiling(0.028, sd_d, n)), _pc(t_ceiling(0.028, sd_d, n))]
        lines.append(f"| {n} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def render_scenarios(rows: Sequence[ScenarioResult]) -> str:
    lines = ["| scenario | rounds (mean / max) | t test p < 0.05 | changed | changed, right "
             "sign | ceiling | t ceiling | within noise | inconclusive | 90% interval "
             "covers the truth | campaigns | goal |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sc = r.sc
        sd_d = sc.sigma * math.sqrt(2)
        real = abs(math.log1p(sc.effect)) > math.log1p(BAND)
        lines.append(
            f"| {sc.name} | {r.rounds_mean:.1f} / {r.rounds_max} | {_pc(r.t_p)} | "
            f"{_pc(r.changed)} | {_pc(r.right_sign) if real else '–'} | "
            f"{_pc(ceiling(sc.effect, sd_d, sc.n_max)) if real else '–'} | "
            f"{_pc(t_ceiling(sc.effect, sd_d, sc.n_max)) if real else '–'} | "
            f"{_pc(r.within)} | {_pc(r.inconclusive)} | {_pc(r.coverage)} | {r.campaigns} | "
            f"{sc.goal} |")
    return "\n".join(lines)


def study_scenarios(k: Counts, seed: int) -> list[ScenarioResult]:
    return [study_scenario(sc, k.single(sc), seed) for sc in SCENARIOS]


def study_patterns(campaigns: int, seed: int) -> dict[int, tuple[float, float]]:
    return {n: study_pattern(campaigns, seed, n) for n in (2, 3)}


def render_rounds(rounds: dict[tuple[str, int], Followed]) -> list[str]:
    """§0c's tables: the share decided at n + k by scenario and n, and by the k stated."""
    ns = sorted({n for _label, n in rounds})
    rt = ["| scenario | " + " | ".join(f"from {n} rounds: decided at n + k ± se (cells)"
                                       for n in ns) + " | share of undecided cells "
          "that state a k |", "|---|" + "---|" * (len(ns) + 1)]
    labels = list(dict.fromkeys(key[0] for key in rounds))
    for label in labels:
        cells = [f"{_pc(rounds[label, n].decided)} ± {_pc(rounds[label, n].se)} "
                 f"({len(rounds[label, n].cells)})" for n in ns]
        given = " / ".join(_pc(rounds[label, n].stated) for n in ns)
        rt.append(f"| {label} | " + " | ".join(cells) + f" | {given} |")
    bins = ["| scenario | " + " | ".join(f"k {a}-{b}" for a, b in RTD_BINS) + " |",
            "|---|" + "---|" * len(RTD_BINS)]
    for label in labels:
        both = [x for n in ns for x in rounds[label, n].cells]
        got = [[d for k_, d in both if a <= k_ <= b] for a, b in RTD_BINS]
        bins.append(f"| {label} | " + " | ".join(
            f"{_pc(share(g))} ({len(g)})" if g else "–" for g in got) + " |")
    start = " and ".join(str(n) for n in ns) + (" rounds together" if len(ns) > 1 else
                                                 " rounds")
    return [*rt, "", f"By the k stated (from {start}): share decided at n + k (cells).",
            "", *bins]


def render_rounds_by_metric(rounds: dict[tuple[str, int], Followed]) -> list[str]:
    """The share decided at n + k by the cells' metric: scenarios as rows, the metrics
    (the counts among them) as columns, every n together."""
    metrics = sorted({m for f in rounds.values() for m in f.metrics})
    out = ["| scenario | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
    for label in dict.fromkeys(key[0] for key in rounds):
        got = [(m, d) for (lab, _n), f in rounds.items() if lab == label
               for m, (_k, d) in zip(f.metrics, f.cells, strict=True)]
        cells = [[d for m_, d in got if m_ == m] for m in metrics]
        out.append(f"| {label} | " + " | ".join(
            f"{_pc(share(c))} ({len(c)})" if c else "–" for c in cells) + " |")
    return out


def render_tables(out: dict[str, Any], k: Counts) -> list[str]:
    """§0: the H200-shaped tables."""
    aa, power, rounds = out["tables_aa"], out["tables_power"], out["rounds"]
    head = "| rounds | " + " | ".join(nz.label for nz in TABLE_NOISES) + " | campaigns |"
    rule = "|---|" + "---|" * (len(TABLE_NOISES) + 1)
    aa_lines = [head, rule]
    for n in TABLE_NS:
        aa_lines.append(f"| {n} | " + " | ".join(
            f"{_pc(aa[nz.label, n][0])} ({_pc(aa[nz.label, n][1])})" for nz in TABLE_NOISES)
            + f" | {k.tables_aa(n)} |")
    exact2 = [aa[nz.label, 2][2] for nz in TABLE_NOISES]
    exact_all = [aa[key][2] for key in aa]
    pw = ["| rounds | H200-shaped table | one cell | t ceiling (one cell) |", "|---|---|---|---|"]
    for n in POWER_NS:
        pw.append(f"| {n} | {_pc(power['H200-shaped table', n])} | "
                  f"{_pc(power['one cell', n])} | "
                  f"{_pc(t_ceiling(0.02, 0.01 * math.sqrt(2), n))} |")
    return [
        "## 0. Tables shaped like the H200 seed run",
        "",
        "### 0a. A/A: share of tables with any false \"changed\" (in the shown rows)",
        "",
        "One arm against the baseline; the only real changes are the exact memory rows "
        "(-40.2%, six of them, as in the H200 seed run); every timed and counted row is an "
        "A/A. A false \"changed\" anywhere (the table or the \"Also changed\" line) "
        "counts; in brackets, the table's shown rows alone. Monte Carlo standard error near "
        f"5%: {_se(k.tables_aa(2))} at {k.tables_aa(2)} campaigns, "
        f"{_se(k.tables_aa(24))} at {k.tables_aa(24)}. Exact memory cells decided right: "
        f"{_pc(min(exact2))} at 2 rounds, {_pc(min(exact_all))} at every n and noise.",
        "",
        *aa_lines,
        "",
        "### 0b. Power: an isolated +2% on decode 128K, 1% per arm",
        "",
        "Share of campaigns calling it \"changed\" (right sign) in the H200-shaped table "
        "(every other row null, memory rows exact at -40.2%) and in a table of that one "
        f"cell; {k.tables_power} campaigns each (standard error near 65%: "
        f"{_se(k.tables_power, 0.65)}).",
        "",
        *pw,
        "",
        "### 0c. \"about k more rounds (80%)\": decided at n + k?",
        "",
        "Each campaign of the H200-shaped table stops at n rounds; every undecided cell "
        "that states a k is followed (a k is stated up to "
        f"{MANY_ROUNDS} rounds in all; past them a cell says \"needs >{MANY_ROUNDS} "
        "rounds\"): the same campaign carried on to n + k rounds, is that cell decided "
        f"there? {k.rounds} campaigns per scenario and n (± the standard error over "
        "them: a campaign's cells share its server lives); the share of undecided cells "
        "that state a k is in the last column (the rest need more rounds). The drift "
        f"scenario's +5% spans {RTD_DRIFT} rounds and goes on at that rate past them.",
        "",
        *render_rounds(rounds),
    ]


def run(campaigns: int, seed: int, progress: Callable[[str], None] = lambda s: None,
        jobs: int = 1) -> tuple[str, dict[str, Any]]:
    """Every study (``jobs`` at a time, each in its own process); the markdown of its
    tables and the numbers behind them."""
    k = Counts(campaigns)
    fixed_ns = list(range(2, 25))
    until_ns = [2, 3, 4, 6, 12]
    exact_ns = [2, 3, 4, 6, 12, 24]
    out: dict[str, Any] = {}
    t0 = time.process_time()

    def step(name: str) -> None:
        progress(f"{name} ({time.process_time() - t0:.0f} s CPU)")

    tasks: dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = {
        "tables_aa": (study_tables_aa, (k.tables_aa, seed), {}),
        "tables_power": (study_tables_power, (k.tables_power, seed), {}),
        **{f"rounds {n}": (study_rounds, (k.rounds, seed, (n,)), {}) for n in RTD_NS},
        "scenarios": (study_scenarios, (k, seed), {}),
        "users": (study_users, (k.users, seed), {}),
        "exact": (study_exact, (k.exact, seed, exact_ns), {}),
        "aa_fixed": (study_aa, (k.aa_fixed, seed, fixed_ns), {}),
        "aa_until": (study_aa, (k.aa_until_of, seed, until_ns), {"until": 0.01, "cap": 24}),
        "pattern": (study_patterns, (k.pattern, seed), {}),
    }
    if jobs <= 1:
        for name, (fn, args, kw) in tasks.items():
            out[name] = fn(*args, **kw)
            step(name)
    else:
        with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
            futures = {name: pool.submit(fn, *args, **kw)
                       for name, (fn, args, kw) in tasks.items()}
            for name, fut in futures.items():
                out[name] = fut.result()
                step(name)
    out["rounds"] = {key: v for n in RTD_NS for key, v in out.pop(f"rounds {n}").items()}
    aa = out["aa_fixed"]

    pat = out["pattern"]
    md = [*render_tables(out, k), "",
        "## 1. A/A tables at fixed rounds: share with any false \"changed\"",
        "",
        "A table is 3 arms x (decode at 32K, 64K, 128K, sharing "
        "each server life's level, + peak VRAM, exact) = 8 cells, all A/A; the goal is at "
        f"most 5% in every cell. Monte Carlo standard error near 5%: "
        f"{_se(k.aa_fixed(NORMAL, 2))} at {k.aa_fixed(NORMAL, 2)} campaigns, "
        f"{_se(k.aa_fixed(NORMAL, 24))} at {k.aa_fixed(NORMAL, 24)}, "
        f"{_se(k.aa_fixed(NOISES[-1], 2))} at {k.aa_fixed(NOISES[-1], 2)}.",
        "",
        render_aa(aa, fixed_ns, k.aa_fixed, until=False),
        "",
        "## 2. A/A tables with --until-ci 1% (cap 24): share with any false \"changed\"",
        "",
        "Each cell: the share (mean rounds run). The planned rounds are the first look; the loop "
        "adds balanced blocks of 3 rounds until every cell's half-width is at most 1%, every "
        "cell is decided at the per-look alpha, or 24 rounds.",
        "",
        render_aa(out["aa_until"], until_ns, k.aa_until_of, until=True),
        "",
        "## 3. Bimodal lives at 2 and 3 rounds: the bound",
        "",
        "| rounds | P(pattern) | of which no arm's lives on both levels | \"changed\" given "
        "the pattern (abbench / without the table's lives / the whole level either) | bound "
        "on the A/A rate (same) | the most \"changed\" given the hidden pattern that can "
        "meet 5% |",
        "|---|---|---|---|---|---|",
        *[f"| {n} | {_pc(pattern_p(n))} | {_pc(hidden_pattern_p(n))} | "
          f"{' / '.join(_pc(x) for x in pat[n])} | "
          f"{' / '.join(_pc(pattern_p(n) * x) for x in pat[n])} | "
          f"{_pc(min(1.0, ALPHA / hidden_pattern_p(n)))} |" for n in (2, 3)],
        "",
        f"{k.pattern} campaigns per row, drawn from the bimodal A/A model given the pattern "
        "(the 3-arm table of §1). \"Without the table's lives\": no cell tested with the "
        "two-level sd (the tenth pass); \"the whole level either\": nor 2 rounds at half "
        "the level (the ninth).",
        "",
        "## 4. Exact rows: share decided right",
        "",
        "The table: 3 arms; decode rows (kv-q8 -15%, ub2048 unchanged), peak "
        "VRAM exact (kv-q8 -40.2%, ub2048 +6.5%), misses/token exact and equal, peak RSS exact "
        "(-0.3%, +0.5%: within the band). \"Flagged exact\": the comparison says it rests on "
        "exact rounds (paired.compare's `exact`).",
        "",
        render_exact(out["exact"], exact_ns, k.exact),
        "",
        "## 5. The users' case: +2.8% at 0.5% per-round sd",
        "",
        "The table: one arm against the baseline, decode at 32K, 64K and "
        "128K all +2.8%, peak VRAM exact and equal (their target-report.md). \"Per-round sd\" "
        "read both ways: 0.5% for each arm's per-round value (the log-ratio's sd is then "
        "0.71%), or 0.5% for the per-round log-ratio (0.35% per arm). Ceilings are per cell; "
        f"{k.users} campaigns per row.",
        "",
        render_users(out["users"]),
        "",
        "## 6. Single comparisons (two arms, one noisy row)",
        "",
        "Noise "
        "1% (log scale) on each arm's per-round value unless the row says otherwise; drift "
        "+5% across the campaign (across the cap with --until-ci) unless it says no drift. "
        "Ceiling: the most often any honest procedure can say \"changed\" within the rounds "
        "(the cap), even knowing the noise (Neyman-Pearson); t ceiling: the power of the "
        "one-sided t test at the band's edge, the most powerful unbiased test when the noise "
        "is estimated from the rounds. Monte Carlo standard error near 75%: "
        f"{_se(3 * k.base, 0.75)} at {3 * k.base} campaigns, {_se(5 * k.base // 4, 0.75)} at "
        f"{5 * k.base // 4}; near 5%: {_se(3 * k.base)}, {_se(5 * k.base // 4)}.",
        "",
        render_scenarios(out["scenarios"]),
    ]
    return "\n".join(md), out


DEFAULT_CAMPAIGNS = 400


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=DEFAULT_CAMPAIGNS,
                    help=f"campaigns per scenario (default {DEFAULT_CAMPAIGNS}): x3 / x1.25 "
                    "for single comparisons at fixed rounds / with --until-ci (x3 at the "
                    "band's edge), x0.3 / x0.1 for A/A tables at up to / over 8 rounds "
                    "(H200-shaped: up to / over 4), x0.6 for power in H200-shaped tables, "
                    "x1/25 for rounds to decide, x1/20 for A/A tables with --until-ci and "
                    "for exact rows")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--jobs", type=int, default=1,
                    help="studies run at once, each in its own process (default 1)")
    ap.add_argument("--no-write", action="store_true", help="do not write docs/simulation.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    text, _ = run(args.campaigns, args.seed, progress=lambda s: print(f"  {s}", flush=True),
                  jobs=args.jobs)
    wall = time.perf_counter() - t0
    cpu = sum(getattr(os.times(), f) for f in ("user", "system", "children_user",
                                                 "children_system"))
    print(text)
    print(f"\n({wall:.0f} s, {cpu:.0f} s CPU)")
    if args.no_write:
        return
    cmd = "`.venv/bin/python benchmarks/simulate.py" + (
        f" --campaigns {args.campaigns}" if args.campaigns != DEFAULT_CAMPAIGNS else "") + (
        f" --seed {args.seed}" if args.seed != 20261201 else "") + (
        f" --jobs {args.jobs}" if args.jobs != 1 else "") + "`"
    write_doc(DOCS, text, f"Command: {cmd} ({cpu:.0f} s CPU, {wall:.0f} s wall time)")


def write_doc(path: Path, tables: str, command: str) -> None:
    """Replace everything from the marker on; keep the hand-written text above it."""
    doc = path.read_text() if path.exists() else "# Simulation study of the verdicts\n\n"
    head, _sep, _rest = doc.partition(MARKER)
    path.write_text(f"{head.rstrip()}\n\n{MARKER}\n\n{command}\n\n{tables}\n")


if __name__ == "__main__":
    main()
