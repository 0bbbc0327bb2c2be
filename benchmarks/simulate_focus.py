"""Focused runs of benchmarks/simulate.py's H200-shaped tables, with more campaigns than
its full run gives them: the power for an isolated +2% at one number of rounds, the
A/A rate at 2-6 rounds under 2-3% noise per arm and bimodal lives, and "about k more
rounds (80%)" followed from one number of rounds (docs/simulation.md, issue 27's goals).

    .venv/bin/python benchmarks/simulate_focus.py power --campaigns 1500 --rounds 12
    .venv/bin/python benchmarks/simulate_focus.py aa --campaigns 400
    .venv/bin/python benchmarks/simulate_focus.py aa --campaigns 400 --noise "drift +5%" --at 8 12
    .venv/bin/python benchmarks/simulate_focus.py rounds --campaigns 64 --rounds 3
    .venv/bin/python benchmarks/simulate_focus.py df --campaigns 100
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from abbench.stats import families
from abbench.stats.decide import reads_lives

sys.path.insert(0, str(Path(__file__).resolve().parent))
import simulate as sim


def power(campaigns: int, rounds: int, seed: int) -> float:
    """Share of campaigns calling the +2% on decode 128K "changed" (right sign): the
    campaigns of ``simulate.study_tables_power`` (same seed, same stream)."""
    name = "H200-shaped table"
    with sim.fast_paths():
        return sim.power_at(campaigns, sim.rng_for(seed, "tables power", name, rounds),
                            sim.h200(decode=(("128K", 0.02),)), rounds)


def aa(campaigns: int, seed: int, noise: sim.Noise, rounds: int, arms: int = 2
       ) -> tuple[float, float]:
    """Shares of A/A H200-shaped tables (exact memory rows the only change) with any
    false "changed", shown or not, and with cells tested as of server lives on two levels
    (below 6 rounds only the table's lives set ``bimodal``: cells.table_lives)."""
    key = ("aa-extra", noise, rounds) + ((arms,) if arms > 2 else ())
    with sim.fast_paths():
        got = sim.aa_tables(campaigns, sim.rng_for(seed, *key), noise, rounds, arms)
    return (sim.share([sim.false_changed(c) for c in got]),
            sim.share([reads_lives(rounds) and any(c.bimodal is not None for _r, _a, c in t)
                       for t in got]))


def pool_counts(campaigns: int, seed: int) -> list[str]:
    """What the decode pools' effective degrees of freedom read (one pool of five decode
    cells per arm, sharing half their noise through the server life: worth 2.5 cells),
    and the degrees of freedom a decode cell is tested with, at 1% per arm."""
    out = ["| rounds | pools of 5 cells | cells' worth: median (mean) | decode cells | df "
           "tested: min / median / max |", "|---|---|---|---|---|"]
    seen: list[tuple[int, float | None]] = []
    count = families.effective_df

    def recorded(ratios: Sequence[Mapping[int, float]]) -> float | None:
        got = count(ratios)
        seen.append((len(ratios), got))
        return got

    families.effective_df = recorded
    try:
        for n in (3, 6, 12):
            seen.clear()
            rng = np.random.default_rng([seed, n])
            dfs = []
            with sim.fast_paths():
                for _ in range(campaigns):
                    it = sim.grow(rng, sim.h200(), sim.TABLE_NOISES[0], n)
                    _n, rows = next(it)
                    it.close()
                    dfs += [cell.comparison.moderated[1] for r in rows
                            if r.metric == "decode_tok_s" for cell in r.cells.values()
                            if cell.comparison is not None
                            and cell.comparison.moderated is not None]
            worth = np.array([v for k, v in seen if k == 5 and v is not None]) / (n - 1)
            out.append(f"| {n} | {worth.size} | {np.median(worth):.2f} ({worth.mean():.2f}) | "
                       f"{len(dfs)} | {min(dfs):.1f} / {np.median(dfs):.1f} / {max(dfs):.1f} |")
    finally:
        families.effective_df = count
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("study", choices=("power", "aa", "rounds", "df"))
    ap.add_argument("--campaigns", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=12,
                    help="power: rounds per campaign; rounds: the rounds followed from")
    ap.add_argument("--noise", nargs="+", default=["2%", "3%", "bimodal 9%"],
                    choices=[nz.short for nz in sim.TABLE_NOISES],
                    help="aa: the noise models (default: 2%%, 3%%, bimodal 9%%)")
    ap.add_argument("--at", type=int, nargs="+", default=[2, 3, 4, 6],
                    help="aa: the rounds (default: 2 3 4 6)")
    ap.add_argument("--arms", type=int, default=2,
                    help="aa: arms in the table, the baseline included (default 2; the "
                    "H200 seed run had 3)")
    ap.add_argument("--seed", type=int, default=None,
                    help="default: 20261201 for power and rounds (simulate.py's), 7 for aa")
    args = ap.parse_args()
    t0 = time.perf_counter()
    se = lambda p: math.sqrt(p * (1 - p) / args.campaigns) * 100  # noqa: E731
    if args.study == "power":
        p = power(args.campaigns, args.rounds, args.seed or 20261201)
        print(f"| {args.rounds} | {p * 100:.1f}% | {se(p):.1f} | {args.campaigns} |")
    elif args.study == "df":
        print("\n".join(pool_counts(args.campaigns, args.seed or 3)))
    elif args.study == "rounds":  # simulate.py's campaigns for the first 1/25 of them
        got = sim.study_rounds(args.campaigns, args.seed or 20261201, (args.rounds,))
        print("\n".join(sim.render_rounds(got)))
        print("\nBy the cells' metric: share decided at n + k (cells).\n")
        print("\n".join(sim.render_rounds_by_metric(got)))
    else:
        print("| noise | rounds | false \"changed\" | se | lives read as two levels | "
              "campaigns |\n|---|---|---|---|---|---|")
        for noise in sim.TABLE_NOISES:
            if noise.short not in args.noise:
                continue
            for n in args.at:
                p, two = aa(args.campaigns, args.seed or 7, noise, n, args.arms)
                print(f"| {noise.short} | {n} | {p * 100:.1f}% | {se(p):.1f} | "
                      f"{two * 100:.1f}% | {args.campaigns} |", flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
