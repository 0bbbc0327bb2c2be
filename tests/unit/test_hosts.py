"""Campaigns over many hosts without a cluster: the shard plan, the statistics of hosts
as blocks, the merge of shard folders (numbering, missing rounds, mixed hosts), the
host fingerprint, the progress line, and the options the CLI refuses."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from abbench.campaign import gather as g
from abbench.campaign import shards as shards_mod
from abbench.campaign.environment import host_fingerprint, visible
from abbench.campaign.shards import (
    FollowState,
    default_shards,
    host_name,
    plan_campaign,
    shard_index,
)
from abbench.config.loader import load_config
from abbench.errors import ConfigError
from abbench.model.records import parse_record, parse_records
from abbench.model.runmeta import parse_meta
from abbench.model.schedule import make_schedule, position_counts
from abbench.model.shardplan import plan_shards, shard_schedule, shard_seed, split_rounds
from abbench.report.compare import run_table
from abbench.report.markdown import render_markdown
from abbench.stats.blocks import (
    BlockComparison,
    compare_blocks,
    flag_limit,
    host_interval,
    round_hosts,
)
from abbench.stats.families import adjust
from abbench.stats.paired import as_json, compare, t_interval
from abbench.store.run import Run
from tests.faultkit import cli, ref_arms

ARMS = ["a", "b"]

# ------------------------------------------------------------------ the shard plan


@pytest.mark.parametrize(("rounds", "shards", "arms", "sizes"), [
    (2, 2, 2, [1, 1]),  # fewer blocks than shards: an even split
    (4, 2, 2, [2, 2]),
    (10, 3, 2, [4, 4, 2]),  # whole blocks of 2 rounds
    (7, 2, 3, [4, 3]),  # 2 blocks of 3, the round left over to the first shard
    (16, 8, 2, [2] * 8),
    (5, 5, 2, [1] * 5),
])
def test_split_rounds(rounds: int, shards: int, arms: int, sizes: list[int]) -> None:
    assert split_rounds(rounds, shards, arms) == sizes


def test_more_shards_than_rounds_is_refused() -> None:
    with pytest.raises(ValueError, match="3 shards need at least 3 rounds"):
        split_rounds(2, 3, 2)


def test_shards_take_the_campaigns_rounds_and_orders_with_their_own_seeds() -> None:
    plans = plan_shards(3, 12, 4, seed=99)
    assert [(p.first_round, p.rounds) for p in plans] == [(0, 3), (3, 3), (6, 3), (9, 3)]
    assert len({p.seed for p in plans}) == 4 and plans[0].seed == shard_seed(99, 0)
    assert plans == plan_shards(3, 12, 4, seed=99)  # derived, not drawn
    arms = ["x", "y", "z"]
    whole = make_schedule(arms, 12, "interleaved", 99)
    got = [s for p in plans for s in shard_schedule(arms, p, "interleaved", 99)]
    assert [(s.round, s.position, s.arm) for s in got] == \
        [(s.round, s.position, s.arm) for s in whole]
    for p in plans:  # each shard holds a whole Latin block: balanced by itself
        slots = shard_schedule(arms, p, "interleaved", 99)
        assert [s.index for s in slots] == list(range(9))
        assert all(c == [1, 1, 1] for c in position_counts(slots, arms).values())
    part = shard_schedule(arms, plans[1], "interleaved", 99, rounds=[4])
    assert {s.round for s in part} == {4} and [s.index for s in part] == [0, 1, 2]


def test_one_round_shards_are_balanced_together() -> None:
    plans = plan_shards(2, 2, 2, seed=5)
    slots = [s for p in plans for s in shard_schedule(ARMS, p, "interleaved", 5)]
    counts = {a: [0, 0] for a in ARMS}
    for s in slots:
        counts[s.arm][s.position] += 1
    assert counts == {"a": [1, 1], "b": [1, 1]}


# ------------------------------------------------------------------ hosts as blocks


def _blocks(rng: np.random.Generator, k: int, n: int, host_sd: float, sigma: float = 0.01
            ) -> tuple[np.ndarray, list[str]]:
    effects = rng.normal(0, host_sd, k) if host_sd else np.zeros(k)
    d = np.concatenate([e + rng.normal(0, sigma, n) for e in effects])
    return d, [f"h{i}" for i in range(k) for _ in range(n)]


def test_hosts_that_agree_give_the_one_host_interval() -> None:
    d, hosts = _blocks(np.random.default_rng(1), 4, 4, 0.0)
    hi = host_interval(d, hosts)
    t = t_interval(d)
    assert hi.method == "pooled" and hi.df == 15
    assert (hi.mean, hi.lo, hi.hi, hi.p) == pytest.approx((t.mean, t.lo, t.hi, t.p))
    assert hi.heterogeneity_p is not None and hi.heterogeneity_p > 0.05
    assert not hi.flagged


def test_anova_numbers_against_scipy() -> None:
    d, hosts = _blocks(np.random.default_rng(2), 3, 5, 0.02)
    hi = host_interval(d, hosts, rule="random")
    groups = [d[i * 5:(i + 1) * 5] for i in range(3)]
    f, p = sps.f_oneway(*groups)
    assert hi.heterogeneity_p == pytest.approx(p, rel=1e-9)
    assert hi.q == pytest.approx(2 * f, rel=1e-9)  # Q = (k - 1) F
    msb = 5 * np.var([x.mean() for x in groups], ddof=1)
    msw = np.mean([np.var(x, ddof=1) for x in groups])
    assert hi.tau2 == pytest.approx(max(0.0, (msb - msw) / 5), rel=1e-9)
    # balanced: the random-effects variance of the mean is MSB / N, with k - 1 df
    assert hi.se == pytest.approx(math.sqrt(msb / 15), rel=1e-9)
    assert hi.df == 2 and hi.mean == pytest.approx(d.mean())
    half = sps.t.ppf(0.975, 2) * hi.se
    assert (hi.lo, hi.hi) == pytest.approx((d.mean() - half, d.mean() + half))


def test_a_host_unlike_the_others_is_flagged_and_widens_the_interval() -> None:
    rng = np.random.default_rng(3)
    d, hosts = _blocks(rng, 4, 4, 0.0)
    d[:4] -= 0.05  # host h0 runs the arm 5% slower
    hi = host_interval(d, hosts, flag_floor=math.log1p(0.01) / 2)
    assert hi.method == "random" and hi.df == 3
    assert hi.flagged == ["h0"]
    t = t_interval(d)
    assert hi.hi - hi.lo > t.hi - t.lo
    z = {h.host: h.z for h in hi.hosts}
    assert z["h0"] is not None and z["h0"] < -flag_limit(12)


def test_the_flag_limit_is_a_t_quantile() -> None:
    assert flag_limit(10**6) == pytest.approx(3.0, abs=1e-3)
    assert flag_limit(8) == pytest.approx(sps.t.ppf(sps.norm.cdf(3.0), 8))
    assert 4.2 < flag_limit(8) < 4.3 and 3.6 < flag_limit(14) < 3.7


def test_two_hosts_that_disagree_are_both_named() -> None:
    d = np.array([0.0, 0.002, -0.001, 0.001, -0.05, -0.052, -0.049, -0.051])
    hi = host_interval(d, ["p"] * 4 + ["q"] * 4, flag_floor=0.005)
    assert hi.method == "random" and hi.df == 1 and hi.flagged == ["p", "q"]


def test_exact_rounds_per_host() -> None:
    same = host_interval([0.1, 0.1, 0.1, 0.1], ["p", "p", "q", "q"])
    assert same.method == "pooled" and same.lo == same.hi == pytest.approx(0.1)
    apart = host_interval([0.1, 0.1, 0.2, 0.2], ["p", "p", "q", "q"])
    assert apart.method == "random" and apart.mean == pytest.approx(0.15)
    assert apart.lo < 0.1 and apart.hi > 0.2


def test_one_round_per_host_is_the_rounds_own_interval() -> None:
    d = [0.01, 0.03, 0.02]
    hi = host_interval(d, ["p", "q", "r"])
    t = t_interval(d)
    assert hi.method == "pooled" and (hi.lo, hi.hi) == pytest.approx((t.lo, t.hi))


def _arms(d: np.ndarray) -> tuple[dict[int, float], dict[int, float]]:
    base = {r: 100.0 for r in range(d.size)}
    return base, {r: 100.0 * math.exp(x) for r, x in enumerate(d)}


def test_compare_blocks_is_paired_compare_for_one_host_and_hosts_that_agree() -> None:
    d, hosts = _blocks(np.random.default_rng(4), 2, 6, 0.0, sigma=0.004)
    d += 0.05
    base, arm = _arms(d)
    plain = compare(base, arm)
    assert compare_blocks(base, arm, dict.fromkeys(range(12), "h0")) == plain
    c = compare_blocks(base, arm, dict(enumerate(hosts)))
    assert isinstance(c, BlockComparison) and c.method == "pooled"
    assert plain is not None
    assert (c.verdict, c.lo, c.hi, c.p_raw) == (plain.verdict, plain.lo, plain.hi, plain.p_raw)
    assert "pooled over 2 hosts that agree" in c.test


def test_compare_blocks_random_effects_verdict_and_adjust() -> None:
    rng = np.random.default_rng(5)
    d, hosts = _blocks(rng, 4, 4, 0.0, sigma=0.005)
    d += 0.05
    d[:4] -= 0.03
    base, arm = _arms(d)
    c = compare_blocks(base, arm, dict(enumerate(hosts)))
    assert isinstance(c, BlockComparison) and c.method == "random"
    assert c.verdict == "changed" and c.better  # +4% over 4 hosts, one at +2%
    assert c.flagged == ["h0"] and "host(s) unlike the others: h0" in " ".join(c.warnings)
    assert "random effects over 4 hosts" in c.test and c.df == 3
    (adj,) = adjust([c])
    assert isinstance(adj, BlockComparison) and adj.hosts == c.hosts
    js = as_json(adj)
    assert js["method"] == "random" and js["hosts"][0]["host"] == "h0"
    # the same data as if from one host: a narrower interval
    plain = compare(base, arm)
    assert plain is not None and c.lo is not None and plain.lo is not None
    assert c.lo < plain.lo


def test_disagreeing_hosts_make_an_a_a_inconclusive_not_changed() -> None:
    rng = np.random.default_rng(6)
    d = np.concatenate([rng.normal(0, 0.003, 8), rng.normal(-0.08, 0.003, 8)])
    base, arm = _arms(d)
    hosts = dict(enumerate(["p"] * 8 + ["q"] * 8))
    pooled = compare(base, arm)
    assert pooled is not None and pooled.verdict == "changed"  # what ignoring hosts says
    c = compare_blocks(base, arm, hosts)
    assert c is not None and c.verdict == "inconclusive"
    assert any("more hosts narrow this interval" in w for w in c.warnings)


def test_round_hosts() -> None:
    def sample(rnd: int, host: str | None = None) -> dict:
        return {"type": "sample", "arm": "a", "workload": "w", "round": rnd,
                **({"host": host} if host else {})}

    rec = [sample(0, "0-a"), sample(0, "0-a"), sample(1, "1-b"),
           {"type": "slot", "arm": "a", "round": 1, "status": "ok"}]
    assert round_hosts(parse_records(rec)) == {0: "0-a", 1: "1-b"}
    assert round_hosts(parse_records([*rec, sample(1, "0-a")])) == {}
    assert round_hosts(parse_records([*rec, sample(2)])) == {}  # another run's side
    assert round_hosts(parse_records([sample(0)])) == {}


# ------------------------------------------------------------------ gather


def _campaign(tmp_path: Path, rounds: int = 4, shards: int = 2, **kw: Any) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    arms = ref_arms(tmp_path / "arms.yaml", Path(sys.executable), {"a": [], "b": []},
                    rounds=rounds)
    cfg = load_config(arms)
    return plan_campaign(cfg, arms, results=tmp_path / "results", rounds=None, seed=11,
                         shards=shards, **kw)


def _fingerprint(host: str, gpu: str | None = None, driver: str | None = None) -> dict:
    return {"hostname": host, "gpus": [{"name": gpu, "uuid": f"GPU-{host}"}] if gpu else [],
            "driver": driver, "cuda": "12.4" if gpu else None, "cpu": "a CPU"}


def _shard(folder: Path, index: int, host: str, *, ratio: float = 1.0, upto: int | None = None,
           fp: dict | None = None) -> Run:
    """A shard folder as ``abbench shard run`` leaves it: ``upto`` slots finished."""
    camp = g.load_campaign(folder)
    plan = g.shard_plans(camp)[index]
    slots = shard_schedule(ARMS, plan, "interleaved", camp["seed"])
    meta = {"id": f"{index}-{host}", "created": f"2026-12-01T10:0{index}:00+00:00",
            "status": "complete" if upto is None else "interrupted",
            "arms": camp["arms"], "baseline": "a", "rounds": plan.rounds, "reps": 1,
            "order": "interleaved", "seed": plan.seed, "environment": {"host": host,
                                                                       "cpu": "a CPU"},
            "schedule": [[s.round, s.position, s.arm] for s in slots],
            "shard": {"index": index}, "host_fingerprint": fp or _fingerprint(host),
            "stats": {}, "timing": {"wall_s": 10.0, "server_s": 2.0, "requests_s": 7.0,
                                    "tasks_s": 0.0, "overhead_s": 1.0}}
    run = Run.create(folder / "shards", meta, {})
    for s in slots[:upto]:
        v = 100.0 * (ratio if s.arm == "b" else 1.0) * (1 + 0.001 * s.round)
        run.append(parse_record({"type": "sample", "slot": s.index, "arm": s.arm, "round": s.round,
                    "position": s.position, "rep": 0, "workload": "decode 64", "context": 64,
                    "decode_tokens": 16, "valid": True, "status": "ok",
                    "metrics": {"decode_tok_s": v}}))
        run.append(parse_record({"type": "slot", "slot": s.index, "arm": s.arm, "round": s.round,
                    "position": s.position, "status": "ok", "log": f"logs/{s.arm}-r{s.round}.log"}))
    return run


def test_gather_merges_shards_with_hosts_and_campaign_numbers(tmp_path: Path) -> None:
    folder = _campaign(tmp_path)
    _shard(folder, 0, "gpu1", ratio=1.10)
    _shard(folder, 1, "gpu2", ratio=1.11)
    out = g.gather(folder)
    assert out.complete and out.progress == {0: (2, 2), 1: (2, 2)} and out.failed_slots == 0
    recs = [r.data() for r in Run(folder).records()]
    samples = [r for r in recs if r["type"] == "sample"]
    assert {(r["host"], r["round"]) for r in samples} == {
        ("0-gpu1", 0), ("0-gpu1", 1), ("1-gpu2", 2), ("1-gpu2", 3)}
    assert sorted({r["slot"] for r in recs}) == list(range(8))
    assert {r["shard_round"] for r in samples if r["shard"] == 1} == {2, 3}
    logs = {r["log"] for r in recs if r["type"] == "slot"}
    assert "shards/0-gpu1/logs/a-r0.log" in logs
    meta = Run(folder).meta()
    assert meta["status"] == "complete" and meta["rounds_done"] == 4
    assert [h["name"] for h in meta["hosts"]] == ["0-gpu1", "1-gpu2"]
    assert meta["timing"]["wall_s"] == 20.0
    md = (folder / "report.md").read_text()
    assert "Hosts as blocks, 2 shard run(s) over 2 shard(s)" in md
    assert "`0-gpu1` 2 rounds (gpu1, a CPU)" in md
    assert "pooled over 2 hosts that agree" in md or "random effects over 2 hosts" in md
    assert "<summary>Per host</summary>" in md
    # a gathered run reads like any run: `abbench report` renders the same
    assert render_markdown(run_table(Run(folder))) == md


def test_a_host_unlike_the_others_is_named_in_the_report(tmp_path: Path) -> None:
    folder = _campaign(tmp_path, rounds=6, shards=3)
    _shard(folder, 0, "gpu1", ratio=1.10)
    _shard(folder, 1, "gpu2", ratio=1.10)
    _shard(folder, 2, "gpu3", ratio=1.30)
    md = g.gather(folder).report_md
    assert "Host `2-gpu3` disagrees with the others: decode 64 (tok/s), b: +30.0% there " \
        "against +10.0% on the other hosts" in md
    assert "Host `0-gpu1`" not in md and "+30.0% (2) ⚑" in md
    assert "random effects over 3 hosts" in md
    assert "(every round exact on each host)" in md
    assert "+16.3% [-1.2, +36.8]) ? ~" in md and "more host" in md  # hosts, not rounds
    assert "1 undecided cell over hosts that disagree would need more hosts" in md


def test_a_shard_cut_short_keeps_its_finished_rounds_and_fails_the_rest(tmp_path: Path) -> None:
    folder = _campaign(tmp_path)
    _shard(folder, 0, "gpu1")
    _shard(folder, 1, "gpu2", upto=3)  # one round done, the other round's second arm not
    camp = g.load_campaign(folder)
    camp["task_states"] = {"1": {"job": "9", "task": 1, "state": "CANCELLED"}}
    g.save_campaign(folder, camp)
    out = g.gather(folder)
    assert not out.complete and out.missing() == [1] and out.progress[1] == (1, 2)
    failed = [r for r in [r.data() for r in Run(folder).records()] if r["type"] == "slot"
              and r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["round"] == 3
    assert "not run: shard 1's task ended CANCELLED (Slurm job 9, task 1)" in failed[0]["reason"]
    meta = Run(folder).meta()
    assert meta["status"] == "interrupted" and meta["rounds_done"] == 3
    assert "Failed: arm" in out.report_md


def test_a_shard_still_running_is_not_failed_yet(tmp_path: Path) -> None:
    folder = _campaign(tmp_path)
    _shard(folder, 0, "gpu1")
    run = _shard(folder, 1, "gpu2", upto=2)
    run.update_meta(status="running")
    out = g.gather(folder)
    assert not [r for r in [r.data() for r in Run(folder).records()] if r["type"] == "slot"
                and r["status"] == "failed"]
    assert Run(folder).meta()["status"] == "running" and out.missing() == [1]
    g.gather(folder, active=())  # its task has ended: what it left is failed
    assert Run(folder).meta()["status"] == "interrupted"


def test_a_shard_that_never_began_fails_its_rounds(tmp_path: Path) -> None:
    folder = _campaign(tmp_path)
    _shard(folder, 0, "gpu1")
    out = g.gather(folder)
    failed = [r for r in [r.data() for r in Run(folder).records()] if r["type"] == "slot"
              and r["status"] == "failed"]
    assert sorted(r["round"] for r in failed) == [2, 2, 3, 3]
    assert all("the shard never began" in r["reason"] for r in failed)
    assert out.progress == {0: (2, 2), 1: (0, 2)}


def test_rounds_run_again_elsewhere_get_numbers_after_the_planned(tmp_path: Path) -> None:
    folder = _campaign(tmp_path)
    _shard(folder, 0, "gpu1")
    _shard(folder, 1, "gpu2", upto=2)  # round 2 done on gpu2, round 3 left
    camp = g.load_campaign(folder)
    plan = g.shard_plans(camp)[1]
    rest = shard_schedule(ARMS, plan, "interleaved", camp["seed"], rounds=[3])
    meta = {"id": "1-gpu3", "created": "2026-12-01T11:00:00+00:00", "status": "complete",
            "arms": camp["arms"], "baseline": "a", "rounds": 1, "reps": 1, "seed": 1,
            "schedule": [[s.round, s.position, s.arm] for s in rest],
            "shard": {"index": 1}, "host_fingerprint": _fingerprint("gpu3")}
    run = Run.create(folder / "shards", meta, {})
    for s in rest:
        run.append(parse_record({"type": "sample", "slot": s.index, "arm": s.arm, "round": s.round,
                    "rep": 0, "workload": "decode 64", "valid": True, "status": "ok",
                    "metrics": {"decode_tok_s": 100.0}}))
        run.append(parse_record({"type": "slot", "slot": s.index, "arm": s.arm, "round": s.round,
                    "position": s.position, "status": "ok"}))
    out = g.gather(folder)
    assert out.complete
    recs = [r.data() for r in Run(folder).records()]
    by_host = {(r["host"], r["round"]) for r in recs if r["type"] == "sample"}
    assert ("1-gpu2", 2) in by_host and ("1-gpu3", 3) in by_host
    assert Run(folder).meta()["rounds_done"] == 4


def test_mixed_hosts_are_refused_unless_allowed(tmp_path: Path) -> None:
    folder = _campaign(tmp_path)
    _shard(folder, 0, "gpu1", fp=_fingerprint("gpu1", "NVIDIA H200", "550.54"))
    _shard(folder, 1, "gpu2", fp=_fingerprint("gpu2", "NVIDIA H100 80GB HBM3", "550.54"))
    with pytest.raises(ConfigError, match=r"gpus: \['NVIDIA H200'\] on 0-gpu1; "
                                          r"\['NVIDIA H100 80GB HBM3'\] on 1-gpu2"):
        g.gather(folder)
    out = g.gather(folder, allow_mixed_hosts=True)
    assert "Warning: the hosts differ (gpus:" in out.report_md
    # the same GPUs on another driver
    folder2 = _campaign(tmp_path / "x")
    _shard(folder2, 0, "gpu1", fp=_fingerprint("gpu1", "NVIDIA H200", "550.54"))
    _shard(folder2, 1, "gpu2", fp=_fingerprint("gpu2", "NVIDIA H200", "560.35"))
    with pytest.raises(ConfigError, match=r"driver: 550\.54 on 0-gpu1; 560\.35 on 1-gpu2"):
        g.gather(folder2)


def test_plan_refuses_until_ci_and_too_many_shards(tmp_path: Path) -> None:
    arms = ref_arms(tmp_path / "arms.yaml", Path(sys.executable), {"a": [], "b": []},
                    rounds=2, stats={"until_ci": "1%"})
    with pytest.raises(ConfigError, match="until-ci"):
        plan_campaign(load_config(arms), arms, results=tmp_path / "r", rounds=None, seed=1,
                      shards=2)
    arms = ref_arms(tmp_path / "arms2.yaml", Path(sys.executable), {"a": [], "b": []},
                    rounds=2)
    with pytest.raises(ConfigError, match="--shards 3 needs at least 3 rounds"):
        plan_campaign(load_config(arms), arms, results=tmp_path / "r", rounds=None, seed=1,
                      shards=3)
    assert default_shards(load_config(arms), 10) == 5


def test_campaign_file(tmp_path: Path) -> None:
    folder = _campaign(tmp_path, rounds=5, shards=2)
    camp = json.loads((folder / "campaign.json").read_text())
    assert [(s["first_round"], s["rounds"]) for s in camp["shards"]] == [(0, 3), (3, 2)]
    assert camp["seed"] == 11 and camp["config_path"].endswith("arms.yaml")
    assert Run(folder).meta()["status"] == "running"  # listed by abbench ls while it runs
    with pytest.raises(ConfigError, match="not a campaign folder"):
        g.load_campaign(tmp_path)


# ------------------------------------------------------------------ hosts, progress, CLI


def test_host_fingerprint_and_visible_gpus() -> None:
    gpus = [{"index": 0, "name": "H200", "uuid": "GPU-aaa"},
            {"index": 1, "name": "H200", "uuid": "GPU-bbb"}]
    assert visible(gpus, None) == gpus and visible(gpus, "") == []
    assert visible(gpus, "1") == [gpus[1]] and visible(gpus, "GPU-aa,0") == [gpus[0]]
    env = {"host": "n1", "gpus": gpus, "driver": "550", "cuda": "12.4", "cpu": "Xeon",
           "cuda_visible_devices": "1"}
    assert host_fingerprint(env) == {"hostname": "n1", "gpus": [{"name": "H200",
                                                                  "uuid": "GPU-bbb"}],
                                     "driver": "550", "cuda": "12.4", "cpu": "Xeon"}
    here = host_fingerprint()
    assert here["hostname"] and here["cpu"]


def test_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABBENCH_HOST", "gpu-node/7 (rack 2)")
    assert host_name() == "gpu-node-7-rack-2"
    monkeypatch.delenv("ABBENCH_HOST")
    assert host_name() and "/" not in host_name()


def test_shard_index_from_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    with pytest.raises(ConfigError, match="no shard index"):
        shard_index(None)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert shard_index(None) == 2
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    assert shard_index(None) == 3 and shard_index(0) == 0


def test_follow_line() -> None:
    st = FollowState({0: {"state": "COMPLETED"}, 1: {"state": "RUNNING"},
                      2: {"state": "PENDING"}}, {0: 2, 1: 1, 2: 0}, {0: 2, 1: 2, 2: 2},
                     started=100.0)
    line, what = st.line(130.0)
    assert what == "shards: 1 done, 1 pending, 1 running; rounds done 3/6"
    assert line == what + "; ETA 0m30s"  # 3 rounds in 30 s, 3 left
    assert FollowState({}, {}, {}, None).line(0.0)[0].endswith("ETA 0m00s")


@pytest.mark.parametrize(("args", "text"), [
    (["--partition", "gpu"], "--partition, --gres, --time and --no-exclusive go with --slurm"),
    (["--shards", "3", "--rounds", "2"], "--shards 3 needs at least 3 rounds"),
])
def test_cli_refuses(tmp_path: Path, args: list[str], text: str) -> None:
    arms = ref_arms(tmp_path / "arms.yaml", Path(sys.executable), {"a": [], "b": []})
    p = cli("run", arms, "--results", tmp_path / "r", *args)
    assert p.returncode == 2 and text in p.stderr, p.stderr


def test_a_shards_nonce_sets_come_from_the_campaigns_seed() -> None:
    assert parse_meta({"id": "r", "seed": 3}).order_seed == 3
    # a shard: the campaign's seed
    assert parse_meta({"id": "r", "seed": 3, "order_seed": 9}).order_seed == 9


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def start(self, total_slots: int) -> None: ...
    def slot(self, index: int, arm: str, round_: int, what: str) -> None: ...
    def finish(self) -> None: ...

    def log(self, message: str) -> None:
        self.lines.append(message)


def test_follow_until_every_task_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _campaign(tmp_path, slurm_opts=shards_mod.SlurmOptions())
    camp = g.load_campaign(folder)
    camp["submissions"] = [{"job": "7", "tasks": {"0": 0, "1": 1}}]
    g.save_campaign(folder, camp)
    polls = iter([
        {0: "PENDING", 1: "PENDING"}, {0: "RUNNING", 1: "PENDING"},
        {0: "COMPLETED", 1: "RUNNING"}, {0: "COMPLETED", 1: "UNKNOWN"},
        {0: "COMPLETED", 1: "UNKNOWN"},  # UNKNOWN twice in a row: final
    ])

    def states(folder_: Path, camp_: dict) -> dict[int, dict]:
        return {i: {"job": "7", "task": i, "state": s} for i, s in next(polls).items()}

    monkeypatch.setattr(shards_mod, "task_states", states)
    log = _Log()
    final = shards_mod.follow(folder, progress=log, sleep=lambda s: None)
    assert {i: s["state"] for i, s in final.items()} == {0: "COMPLETED", 1: "UNKNOWN"}
    assert log.lines[0] == "shards: 2 pending; rounds done 0/4; ETA ?"
    assert "shards: 1 completed, 1 unknown; rounds done 0/4" in log.lines[-1]
    assert g.load_campaign(folder)["task_states"]["1"]["state"] == "UNKNOWN"


def test_resume_submits_only_the_shards_left(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _campaign(tmp_path, rounds=6, shards=3, slurm_opts=shards_mod.SlurmOptions())
    _shard(folder, 0, "gpu1")
    _shard(folder, 1, "gpu2", upto=1)
    camp = g.load_campaign(folder)
    camp["submissions"] = [{"job": "7", "tasks": {"0": 0, "1": 1, "2": 2}}]
    g.save_campaign(folder, camp)
    submitted: list[list[int]] = []
    monkeypatch.setattr(shards_mod, "task_states", lambda f, c: {
        0: {"state": "COMPLETED"}, 1: {"state": "CANCELLED"}, 2: {"state": "RUNNING"}})
    monkeypatch.setattr(shards_mod, "submit", lambda f, idx, camp=None: submitted.append(idx))
    followed: list[Path] = []
    monkeypatch.setattr(shards_mod, "follow", lambda f, **kw: followed.append(f))
    log = _Log()
    out = shards_mod.resume_campaign(folder, progress=log)
    assert submitted == [[1]]  # 0 is complete, 2 still runs: followed, not submitted
    assert followed == [folder]
    assert "following shard(s) 2, still in Slurm" in " ".join(log.lines)
    assert out.gathered.missing() == [1, 2]
