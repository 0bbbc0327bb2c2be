"""Simulation study of hosts as blocks: campaigns sharded over 2-8 hosts.

One command: ``.venv/bin/python benchmarks/simulate_hosts.py`` (a few minutes); prints
the table and writes it into docs/simulation-hosts.md (between its ``<!-- table -->``
marks).

Every campaign uses the real code: the shards and their arm orders from
abbench.model.shardplan (plan_shards, shard_schedule, a fresh campaign seed each time),
the cell's verdict from abbench.stats.blocks.compare_blocks, the one-host reference
from abbench.stats.paired.compare. Each arm's per-round value is
``100 * exp(host speed + effect + host effect + drift + noise)``: host speed
N(0, 10%) per host (both arms: it cancels in the ratio), noise N(0, 1%) per server
life on the log scale, a drift at the rate of +2% per 32 server lives (one host's
whole campaign; a shard of fewer lives drifts less), and a host effect
on arm B only: none, one host 5% slower for B, or N(0, tau) per host. Alpha 0.05,
noise band ±1%, 16 rounds in all (8, 4 or 2 per host).

Rules compared (``rule=`` of compare_blocks): ``auto``, what abbench ships (random
effects when the F test of "every host has the same ratio" gives p < 0.01 or a host
is flagged, else the paired t over all rounds), the same with the F test at 0.05;
``pooled`` (hosts ignored: the one-host rule on all the
rounds); ``dl`` (random effects whenever DerSimonian-Laird's tau^2 > 0); ``random``
(random effects always, t with hosts - 1 df).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from abbench.model.shardplan import plan_shards, shard_schedule
from abbench.stats.blocks import HETEROGENEITY_ALPHA, BlockComparison, Rule, compare_blocks
from abbench.stats.paired import Comparison, compare

ARMS = ["A", "B"]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "simulation-hosts.md"
#: name -> (rule, heterogeneity alpha)
RULES: dict[str, tuple[Rule, float]] = {
    "auto": ("auto", HETEROGENEITY_ALPHA),
    "auto05": ("auto", 0.05),
    "pooled": ("pooled", HETEROGENEITY_ALPHA),
    "dl": ("dl", HETEROGENEITY_ALPHA),
    "random": ("random", HETEROGENEITY_ALPHA),
}
RULE_NAMES = {"auto": "abbench (auto)", "auto05": "the same with the F test at 0.05",
              "pooled": "hosts ignored (pooled t)",
              "dl": "random effects when tau^2 > 0", "random": "random effects always"}


@dataclass(frozen=True)
class Scenario:
    name: str
    hosts: int
    rounds: int = 16
    effect: float = 0.0  # true change of B against A on every host
    slow_host: float = 0.0  # host 0 runs B this much slower (fraction)
    tau: float = 0.0  # sd of a per-host effect on B (log scale)
    sigma: float = 0.01
    host_speed: float = 0.10
    drift: float = 0.02  # across 32 server lives (one host's campaign); a rate
    goal: str = ""


@dataclass(frozen=True)
class Result:
    """One rule's outcome over a scenario's campaigns."""

    changed: float  # "changed" (any sign)
    right_sign: float  # "changed" with the true effect's sign
    coverage: float  # the shown (90%) interval covers the true effect
    random_share: float  # the rule used random effects
    slow_flagged: float  # host 0 (the slow one) flagged
    any_flagged: float  # some host flagged


@dataclass(frozen=True)
class Row:
    sc: Scenario
    results: dict[str, Result]


def campaign(rng: np.random.Generator, sc: Scenario, seed: int
             ) -> tuple[dict[str, dict[int, float]], dict[int, str]]:
    vals: dict[str, dict[int, float]] = {a: {} for a in ARMS}
    hosts: dict[int, str] = {}
    speed = rng.normal(0.0, sc.host_speed, sc.hosts)
    host_b = rng.normal(0.0, sc.tau, sc.hosts) if sc.tau else np.zeros(sc.hosts)
    if sc.slow_host:
        host_b[0] += math.log1p(-sc.slow_host)
    for plan in plan_shards(len(ARMS), sc.rounds, sc.hosts, seed):
        slots = shard_schedule(ARMS, plan, "interleaved", seed)
        noise = rng.normal(0.0, sc.sigma, len(slots))
        for s, e in zip(slots, noise, strict=True):
            drift = math.log1p(sc.drift) * s.index / (2 * sc.rounds - 1)
            eff = math.log1p(sc.effect) + host_b[plan.index] if s.arm == "B" else 0.0
            vals[s.arm][s.round] = 100.0 * math.exp(speed[plan.index] + eff + drift + e)
            hosts[s.round] = f"h{plan.index}"
    return vals, hosts


def run_scenario(args: tuple[Scenario, int, int]) -> Row:
    sc, campaigns, seed = args
    rng = np.random.default_rng(seed)
    outs: dict[str, list[Comparison]] = {r: [] for r in RULES}
    for k in range(campaigns):
        vals, hosts = campaign(rng, sc, seed * 100003 + k)
        one = compare(vals["A"], vals["B"], alpha=0.05, noise_band=0.01)
        assert one is not None
        for name, (rule, het) in RULES.items():
            c = one if sc.hosts == 1 else compare_blocks(
                vals["A"], vals["B"], hosts, alpha=0.05, noise_band=0.01, rule=rule,
                heterogeneity_alpha=het, paired=one)
            assert c is not None
            outs[name].append(c)
    truth = sc.effect

    def frac(pred: list[bool]) -> float:
        return float(np.mean(pred)) if pred else 0.0

    results = {}
    for rule, cs in outs.items():
        blocks = [c for c in cs if isinstance(c, BlockComparison)]
        results[rule] = Result(
            changed=frac([c.verdict == "changed" for c in cs]),
            right_sign=frac([c.verdict == "changed" and (c.change or 0) * truth > 0
                             for c in cs]),
            coverage=frac([c.lo is not None and c.hi is not None and c.lo <= truth <= c.hi
                           for c in cs]),
            random_share=frac([c.method == "random" for c in blocks]),
            slow_flagged=frac([any(h.flagged and h.host == "h0" for h in c.hosts)
                               for c in blocks]),
            any_flagged=frac([bool(c.flagged) for c in blocks]))
    return Row(sc, results)


def scenarios() -> list[Scenario]:
    out = [Scenario("2% effect, one host", 1, effect=0.02, goal="the power to match"),
           Scenario("A/A, one host, a host effect on B, tau 2%", 1, tau=0.02,
                    goal="(what one host cannot see)")]
    for k in (2, 4, 8):
        out += [
            Scenario(f"A/A, {k} hosts that agree", k, goal="changed <= 5%"),
            Scenario(f"A/A, {k} hosts, one 5% slower for B", k, slow_host=0.05,
                     goal="changed <= 5%; the host flagged"),
            Scenario(f"A/A, {k} hosts, host effects on B, tau 1%", k, tau=0.01,
                     goal="changed <= 5%"),
            Scenario(f"A/A, {k} hosts, host effects on B, tau 2%", k, tau=0.02,
                     goal="changed <= 5%"),
            Scenario(f"2% effect, {k} hosts that agree", k, effect=0.02,
                     goal="changed, right sign: as one host"),
        ]
    return out


def _pc(x: float) -> str:
    return f"{x * 100:.1f}%"


def render(rows: list[Row], campaigns: int) -> str:
    others = [r for r in RULES if r != "auto"]
    head = ["scenario", "goal", "abbench: changed", "covers", "random effects used",
            "slow host flagged", "some host flagged",
            *(f"{RULE_NAMES[r]}: changed / covers" for r in others)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        sc, res = row.sc, row.results
        many = sc.hosts > 1

        def hit(r: Result, effect: float = sc.effect) -> float:
            return r.right_sign if effect else r.changed

        a = res["auto"]
        cells = [sc.name, sc.goal, _pc(hit(a)), _pc(a.coverage),
                 _pc(a.random_share) if many else "–",
                 _pc(a.slow_flagged) if sc.slow_host else "–",
                 _pc(a.any_flagged) if many else "–"]
        cells += [f"{_pc(hit(res[r]))} / {_pc(res[r].coverage)}" if many else "–"
                  for r in others]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"{campaigns} campaigns per scenario, the same campaigns for every rule; "
                 "16 rounds of 2 arms in all, split into whole rounds per host by "
                 "abbench.model.shardplan; alpha 0.05, noise band ±1%; noise 1% per server life "
                 "(log scale), host speed N(0, 10%), drift +2% per 32 server lives. "
                 "\"changed\" is false in an A/A row, and counted with the right sign in "
                 "an effect row (power); covers: the 90% interval covers the true effect "
                 "(0 in an A/A row). Monte Carlo standard error of a percentage near 5% or "
                 f"95%: {_pc(math.sqrt(0.05 * 0.95 / campaigns))}.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--jobs", type=int, default=1, help="scenarios run in parallel")
    ap.add_argument("--no-write", action="store_true",
                    help="do not write docs/simulation-hosts.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    work = [(sc, args.campaigns, args.seed + k) for k, sc in enumerate(scenarios())]
    if args.jobs > 1:
        with multiprocessing.Pool(args.jobs) as pool:
            rows = pool.map(run_scenario, work, chunksize=1)
    else:
        rows = [run_scenario(w) for w in work]
    table = render(rows, args.campaigns)
    print(table)
    secs = time.perf_counter() - t0
    print(f"\n({secs:.0f} s)")
    if not args.no_write:
        text = DOCS.read_text() if DOCS.exists() else "# Hosts as blocks: simulation\n\n" \
            "<!-- table -->\n<!-- /table -->\n"
        head, _, rest = text.partition("<!-- table -->")
        _, _, tail = rest.partition("<!-- /table -->")
        DOCS.write_text(f"{head}<!-- table -->\n\nCommand: `.venv/bin/python "
                        f"benchmarks/simulate_hosts.py --campaigns {args.campaigns} --seed "
                        f"{args.seed}` ({secs:.0f} s)\n\n{table}\n\n<!-- /table -->{tail}")


if __name__ == "__main__":
    main()
