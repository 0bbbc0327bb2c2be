"""What a run would do, in words: printed by ``abbench validate``."""

from __future__ import annotations

from abbench.config.arms import resolve_arms
from abbench.config.infer import infer_preset
from abbench.config.schema import Config
from abbench.config.secrets import scrub
from abbench.config.storage import config_secret_values, redact_env
from abbench.config.values import format_context, format_cpus
from abbench.config.workloads import Arrival, Workload
from abbench.model.schedule import Slot, position_counts


def _preset_origin(cfg: Config, index: int) -> str:
    """`` (from the start command)`` when the preset was inferred, and what to do
    when it fell back to custom; empty when the file names it."""
    raw = cfg.arms[index]
    if raw.preset is not None or cfg.defaults.preset is not None:
        return ""
    start = raw.start if raw.start is not None else cfg.defaults.start
    if infer_preset(start, cfg.vars) is not None:
        return " (from the start command)"
    return " (the start command names no known server: write preset:)"


def describe_plan(cfg: Config, schedule: list[Slot], seed: int, *,
                  rounds: int | None = None, warnings: list[str] | None = None,
                  sets: list[str] | None = None, seed_drawn: bool = False) -> str:
    """The plan ``abbench validate`` prints: arms, rounds and order, workloads, then
    the ``warnings`` its checks gave; ``sets``: the fingerprint sets as described;
    ``seed_drawn``: the seed was drawn for this plan (``run`` draws its own)."""
    n_rounds = rounds or cfg.rounds
    lines = [f"{cfg.source}: OK"]
    lines.append("arms:")
    secrets = config_secret_values(cfg)
    for i, arm in enumerate(resolve_arms(cfg)):
        base = " (baseline)" if arm.name == cfg.baseline_name else ""
        lines.append(f"  {arm.name}{base}: label {arm.label!r}, preset {arm.preset}"
                     f"{_preset_origin(cfg, i)}, "
                     f"port {arm.port}, ready {arm.ready.path} within {arm.ready.timeout:g} s"
                     + (f", cpus {format_cpus(arm.cpus)}" if arm.cpus is not None else "")
                     + (f", nice {arm.nice:+d}" if arm.nice is not None else ""))
        lines.append(f"    start: {scrub(' '.join(arm.argv), secrets)}")
        if arm.env:
            env = " ".join(f"{k}={v}" for k, v in redact_env(arm.env).items())
            lines.append(f"    env: {scrub(env, secrets)}")
    seed_s = f", seed {seed}" if cfg.order == "interleaved" else ""
    if seed_drawn and seed_s:
        seed_s += (f" (drawn for this plan: run draws its own unless --seed {seed} or "
                   "seed: in the file)")
    lines.append(f"rounds: {n_rounds} x {cfg.reps} rep(s), order {cfg.order}{seed_s}, "
                 f"{cfg.warmup} warm-up request(s) after each start")
    lines.append("order:")
    by_round: dict[int, list[str]] = {}
    for s in schedule:
        by_round.setdefault(s.round, []).append(s.arm)
    if cfg.order == "sequential":
        lines.append("  " + " ".join(s.arm for s in schedule))
    else:
        for r, arms in by_round.items():
            lines.append(f"  round {r}: {' '.join(arms)}")
    counts = position_counts(schedule, cfg.arm_names)
    lines.append("positions (times first, second, ...): " + "; ".join(
        f"{a} {c}" for a, c in counts.items()))
    lines.append("workloads:")
    per_life = 0
    for w in cfg.workloads:
        if w.replay is not None:
            lines.append(f"  {w.title}: {w.replay.describe()}")
            if w.sessions is not None:
                per_life += cfg.reps * w.sessions.count * w.sessions.turns
            continue
        if w.load is not None:
            lines.append(f"  {_describe_load(w)}")
            per_life += cfg.reps * sum(w.load.warmup_for(lv) + w.load.requests
                                       for lv in w.load.levels())
            continue
        if w.capacity is not None:
            c = w.capacity
            what = "concurrency" if c.concurrency is not None else "rate"
            lo, hi = c.range
            lines.append(f"  {w.title}: highest {what} in [{lo:g}, {hi:g}] meeting "
                         + ", ".join(f"{k[5:]} <= {v:g}" for k, v in c.bounds().items())
                         + f" (resolution {c.resolution:g}, at most {c.max_levels} levels)")
            continue
        ctx = ", ".join(format_context(c) for c in w.contexts)
        side = ""
        if w.side_calls:
            sc = w.side_calls
            side = (f", side calls: {sc.count} x ({sc.prompt_tokens} prompt + {sc.max_tokens} "
                    f"decode tokens, {sc.concurrency} at a time)")
        lines.append(f"  {w.title}: contexts {ctx}, {w.decode_tokens} decode tokens{side}")
        per_life += len(w.contexts) * cfg.reps * (1 + (w.side_calls.count if w.side_calls else 0))
    if cfg.collectors:
        lines.append("collectors: " + ", ".join(c.kind for c in cfg.collectors))
    if cfg.quality:
        q = cfg.quality
        what = ", ".join(x for x in (q.suite and f"suite {q.suite}",
                                     q.command and f"command {q.command!r}") if x)
        lines.append(f"quality: {what}; rounds 0, {q.every}, {2 * q.every}, ...")
    if cfg.fingerprints:
        f = cfg.fingerprints
        sets_text = ", ".join(sets if sets is not None else
                              [r.name or str(r.path) for r in f.sets])
        warm = " and a warm pass" if f.warm else ""
        tokens = f.max_tokens or "the set file's (or 32)"
        lines.append(f"fingerprints: {sets_text}; cold pass after each start{warm}, "
                     f"{tokens} tokens per prompt")
    if cfg.speculative:
        sp = cfg.speculative
        which = f"the first {sp.prompts}" if sp.prompts else "all"
        length = sp.max_tokens or "the set file's (or 32)"
        lines.append("speculative decoding: " + ", ".join(r.name or str(r.path) for r in sp.sets)
                     + f"; {which} prompts of each, {length} tokens, after the workloads")
    total = per_life + cfg.warmup
    lines.append(f"workload requests: {total} per server life ({cfg.warmup} warm-up), "
                 f"{total * len(schedule)} in all over {len(schedule)} server lives")
    lines += [f"warning: {w}" for w in warnings or []]
    return "\n".join(lines)


def _describe_load(w: Workload) -> str:
    spec = w.load
    assert spec is not None
    if isinstance(spec.arrival, Arrival):
        a = spec.arrival
        cap = f", at most {a.max_concurrency} in flight" if a.max_concurrency else ""
        how = f"open loop, {a.process} arrivals at " + ", ".join(
            f"{r:g}" for r in a.rate) + f" req/s{cap}"
    else:
        how = "closed loop at concurrency " + ", ".join(str(c) for c in spec.concurrency or [])
    warm = f"{spec.warmup} warm-up" if spec.warmup is not None else \
        "as many warm-up as the concurrency" if not isinstance(spec.arrival, Arrival) \
        else "1 warm-up"
    slo = ""
    if w.slo is not None:
        slo = ", goodput SLO " + ", ".join(f"{k} <= {v:g}" for k, v in
                                         w.slo.model_dump(exclude_none=True).items())
    return (f"{w.title}: {how}; {spec.requests} requests per level ({warm}), "
            f"{format_context(spec.prompt_tokens)} prompt + {spec.output_tokens} output "
            f"tokens each, within {spec.timeout:g} s per server life{slo}")
