"""Issue 17 on the reference server playing the recorded real servers
(tests/refserver.py --shapes tests/ref/shapes/...): the stop order and /dev/shm, the
hang probe, SGLang's /server_info fallback, vLLM's {"success": false} flush, the
counters a build lacks and the source of misses/token, SGLang's lazily made counter."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from abbench.campaign.runner import Campaign, RunOptions
from abbench.config.arms import ResolvedArm, resolve_arms
from abbench.config.loader import config_from_data, load_config
from abbench.server.process import remove_stale_shm, shm_inodes, start_server
from tests.conftest import (
    no_process_left,
    no_server_left,
    refserver_start,
    started_pids,
    write_arms,
)
from tests.faultkit import wait_for

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ROOT / "tests" / "ref" / "shapes"
VLLM_ON = SHAPES / "vllm-0.32.0" / "dev-mode-prefix-caching-on"
VLLM_OFF = SHAPES / "vllm-0.32.0" / "dev-mode-prefix-caching-off"
VLLM_NO_DEV = SHAPES / "vllm-0.32.0" / "no-dev-mode-per-request-metrics"
SGLANG = SHAPES / "sglang-0.5.23" / "default"


def _campaign(tmp_path: Path, results: Path, preset: str, arms: dict[str, list[str]], *,
              collectors: list[dict[str, Any]], defaults: dict[str, Any] | None = None,
              rounds: int = 1, contexts: tuple[int, ...] = (64, 128),
              workloads: list[dict[str, Any]] | None = None, reps: int = 1) -> Any:
    if len(arms) == 1:  # a run compares two arms: the same again as "b"
        arms = {**arms, "b": next(iter(arms.values()))}
    doc = {"rounds": rounds, "reps": reps, "warmup": 1,
           "defaults": {"preset": preset, "ready": {"timeout": 30, "interval": 0.02},
                        "stop_grace": 3, **(defaults or {})},
           "arms": [{"name": n, "start": refserver_start(*flags)} for n, flags in arms.items()],
           "workloads": workloads or [{"contexts": list(contexts), "decode_tokens": 16}],
           "collectors": collectors}
    path = write_arms(tmp_path / "arms.yaml", json.dumps(doc))
    out = Campaign(load_config(path), RunOptions(results=results)).execute()
    assert no_server_left(out.run.path)
    return out


def _of(recs: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in recs if all(r.get(k) == v for k, v in match.items())]


# ------------------------------------------------------------------ stopping


def _server(tmp_path: Path, *flags: str, grace: float = 5.0) -> Any:
    cfg = config_from_data({
        "defaults": {"preset": "llama.cpp", "ready": {"timeout": 20}, "stop_grace": grace},
        "arms": [{"name": "a", "start": refserver_start(*flags)},
                 {"name": "b", "start": refserver_start()}],
        "workloads": [{"contexts": [64]}]}, source=str(tmp_path / "arms.yaml"))
    arm = resolve_arms(cfg)[0]

    def argv(port: int, a: ResolvedArm = arm) -> list[str]:
        return a.command({"port": str(port), "host": a.host})
    s = start_server(arm, round_=0, log_path=tmp_path / "a.log", argv_for_port=argv)
    s.wait_ready()
    return s


def _catches_term(pid: int) -> bool:
    """Whether process ``pid`` has a SIGTERM handler installed (its SigCgt mask)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    (mask,) = [line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")]
    return bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))


def _events(log: Path) -> dict[str, float]:
    return {" ".join(line.split()[:2]): float(line.split()[2])
            for line in log.read_text().splitlines()}


def test_stop_terms_the_main_process_first_then_the_group_within_the_grace(
        tmp_path: Path) -> None:
    # the main takes 0.5 s to shut down (as vLLM's and SGLang's do, stopping their
    # children themselves); its child waits for a TERM of its own
    log = tmp_path / "stop.log"
    s = _server(tmp_path, "--stop-log", str(log), "--child")
    wait_for(lambda: any(_catches_term(c.pid) for c in psutil.Process(s.pid).children()),
             60, "the child to install its TERM handler")
    code = s.stop()
    ev = _events(log)
    assert code == 0 and set(ev) == {"main TERM", "main exit", "child TERM"}, ev
    # the child saw no TERM while the main was shutting down: the group's came after
    assert ev["main TERM"] < ev["main exit"] <= ev["child TERM"]
    text = (tmp_path / "a.log").read_text()
    assert "refserver: stopping\n# abbench: stopped: exit code 0\n" in text
    assert "SIGKILL" not in text
    assert no_process_left(started_pids(servers=True))


def test_stop_kills_what_ignores_term_once_the_grace_is_over(tmp_path: Path) -> None:
    log = tmp_path / "stop.log"
    s = _server(tmp_path, "--stop-log", str(log), "--ignore-term", grace=1.0)
    code = s.stop()
    assert code == -9  # killed, once the grace was over
    assert "main TERM" in _events(log)  # it was asked first
    assert "# abbench: stopped: exit code -9; SIGKILL after stop_grace 1 s\n" in \
        (tmp_path / "a.log").read_text()


def test_stop_removes_what_the_dead_server_left_in_dev_shm_and_logs_it(
        tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    tag = uuid.uuid4().hex[:8]
    name = f"psm_abbtest_{tag}"  # the server maps it, and leaves it when it exits
    held, old, foreign = (shm / f"psm_abbtest_{k}_{tag}" for k in ("held", "old", "foreign"))
    old.write_bytes(b"x")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    try:
        s = _server(tmp_path, "--leave-shm", name)
        assert (shm / name).exists()
        # made after the server's start, by another process, mapped by none now: not
        # the server's (the name-and-age rule alone removed it)
        foreign.write_bytes(b"z")
        with open(held, "wb") as f:  # a live process (this test) holds it open: kept
            f.write(b"y" * 8192)
            f.flush()
            s.stop()
            assert held.exists()
        assert not (shm / name).exists()
        assert old.exists() and foreign.exists()
        text = (tmp_path / "a.log").read_text()
        assert f"# abbench: removed what the server left in /dev/shm: {name} (4 KiB)\n" in text
        assert tag not in text.replace(name, "")
    finally:
        for p in (held, old, foreign, shm / name):
            p.unlink(missing_ok=True)


def test_a_live_named_semaphore_is_never_removed() -> None:
    # glibc maps a named semaphore under the temporary name it made it with
    # ("/dev/shm/sem.XXXXXX (deleted)"): by name it looked unused, and a stop removed
    # the sem.mp-* of vLLM servers starting beside it (their engine died: "No such file")
    import multiprocessing

    before = {n for n in os.listdir("/dev/shm") if n.startswith("sem.mp-")}
    lock = multiprocessing.get_context("spawn").Lock()
    (mine,) = {n for n in os.listdir("/dev/shm") if n.startswith("sem.mp-")} - before
    assert not any(r.startswith(mine) for r in remove_stale_shm(time.time() - 60))
    assert os.path.exists(f"/dev/shm/{mine}")
    assert os.stat(f"/dev/shm/{mine}").st_ino in shm_inodes([str(os.getpid())])
    del lock


# ------------------------------------------------------------------ hang probe


@pytest.mark.parametrize(("probe_s", "hung"), [(4.0, False), (0.5, True)])
def test_hang_probe_waits_the_presets_timeout(tmp_path: Path, results: Path,
                                              probe_s: float, hung: bool) -> None:
    # a request goes silent; /health then takes 2 s (SGLang's runs a generation): a
    # probe that waits 4 s finds the server alive, one that waits 0.5 s calls it hung
    out = _campaign(tmp_path, results, "sglang",
                    {"a": ["--shapes", str(SGLANG), "--fault", "hang", "--fault-every", "2",
                           "--health-delay", "2"]},
                    collectors=[], contexts=(64,),
                    defaults={"request_timeout": 1.0,
                              "preset_fields": {"hang_probe_timeout_s": probe_s}})
    recs = [r.data() for r in out.run.records()]
    (slot,) = _of(recs, type="slot", arm="a")
    log = (out.run.path / slot["log"]).read_text()
    assert log.count("refserver: GET /health, answering in 2 s") == 1  # one probe
    if hung:
        assert slot["status"] == "failed"
        assert "the server hangs: no answer to GET /health in 0.5 s" in slot["reason"]
    else:
        assert slot["status"] == "ok", slot


def test_no_hang_probe_when_a_request_fails_without_going_silent(
        tmp_path: Path, results: Path) -> None:
    # HTTP 500 answers: the server is talking, /health is not asked (it would take 30 s)
    out = _campaign(tmp_path, results, "sglang",
                    {"a": ["--shapes", str(SGLANG), "--fault", "http500", "--fault-every", "2",
                           "--health-delay", "30"]}, collectors=[])
    recs = [r.data() for r in out.run.records()]
    (slot,) = _of(recs, type="slot", arm="a")
    assert slot["status"] == "ok"
    assert [s["status"] for s in _of(recs, type="sample", arm="a")] == ["failed", "ok"]
    assert "GET /health, answering" not in (out.run.path / slot["log"]).read_text()


def test_no_hang_probe_after_a_load_level_that_failed_without_going_silent(
        tmp_path: Path, results: Path) -> None:
    # the load path too: every request answers HTTP 500, the level fails, and the
    # server, which answers, is not probed (it used to be, for a fixed 5 s)
    out = _campaign(tmp_path, results, "sglang",
                    {"a": ["--shapes", str(SGLANG), "--fault", "http500", "--fault-every", "1",
                           "--health-delay", "30"]}, collectors=[],
                    workloads=[{"name": "load", "load": {
                        "concurrency": [2], "requests": 4, "prompt_tokens": 16,
                        "output_tokens": 4}}])
    recs = [r.data() for r in out.run.records()]
    (slot,) = _of(recs, type="slot", arm="a")
    (level,) = _of(recs, type="sample", arm="a")
    assert level["status"] == "failed" and "HTTP 500" in level["reason"], level
    assert slot["status"] == "ok", slot
    assert "GET /health, answering" not in (out.run.path / slot["log"]).read_text()


# ------------------------------------------------------------- server info


@pytest.mark.parametrize("missing", [[], ["--missing", "/server_info"]])
def test_sglang_server_info_then_the_deprecated_path(tmp_path: Path, results: Path,
                                                     missing: list[str]) -> None:
    out = _campaign(tmp_path, results, "sglang",
                    {"a": ["--shapes", str(SGLANG), *missing]}, collectors=[], contexts=(64,))
    body = json.loads((SGLANG / "server_info.json").read_text())["/server_info"]["body"]
    got = out.run.meta()["servers"]["a"]
    assert got == {k: v for k, v in body.items() if k != "chat_template"}
    assert got["context_length"] == 4096 and out.status == "complete"
    slot = _of([r.data() for r in out.run.records()], type="slot", arm="a")[0]
    log = (out.run.path / slot["log"]).read_text()
    asked = [line.split()[-1] for line in log.splitlines() if "refserver: GET /" in line]
    assert asked == (["/server_info"] if not missing else ["/get_server_info"])


def test_no_server_info_at_either_path_records_none(tmp_path: Path, results: Path) -> None:
    out = _campaign(tmp_path, results, "sglang",
                    {"a": ["--shapes", str(SGLANG), "--missing", "/server_info",
                           "--missing", "/get_server_info"]}, collectors=[], contexts=(64,))
    assert "a" not in out.run.meta()["servers"] and out.status == "complete"


# ------------------------------------------------------------------- flush


def _flush_run(tmp_path: Path, results: Path, flags: list[str], retry_s: float = 1.0) -> Any:
    return _campaign(tmp_path, results, "vllm",
                     {"a": ["--shapes", str(VLLM_ON), "--prompt-tokens-details", *flags]},
                     collectors=[{"kind": "flush"}, {"kind": "prometheus"},
                                 {"kind": "response_field",
                                  "name": "misses_per_token_usage"}],
                     defaults={"preset_fields": {"flush_retry_s": retry_s}})


def test_vllm_flush_answering_success_false_is_asked_again(tmp_path: Path,
                                                           results: Path) -> None:
    out = _flush_run(tmp_path, results, ["--flush-false", "2"])
    recs = [r.data() for r in out.run.records()]
    flushes = _of(recs, type="flush", arm="a")
    assert [f["ok"] for f in flushes] == [True, True]
    assert flushes[0]["attempts"] == 3 and flushes[1]["attempts"] == 1
    assert flushes[0]["body"] == {"success": True}
    prom = _of(recs, collector="prometheus", type="sample", arm="a")
    assert [r["metrics"]["misses_per_token"] for r in prom] == [64 / 16, 128 / 16]


def test_a_flush_that_stays_false_blanks_the_windows_rows_with_the_reason(
        tmp_path: Path, results: Path) -> None:
    out = _flush_run(tmp_path, results, ["--flush-false", "-1"], retry_s=1.0)
    recs = [r.data() for r in out.run.records()]
    flushes = _of(recs, type="flush", arm="a")
    assert len(flushes) == 2 and not any(f["ok"] for f in flushes)
    why = ("the server answered success=False after {} attempt(s) in 1 s (blocks still "
           "held by running requests?)")
    # asked again, 0.25 s apart, for 1 s: at 0, 0.25, 0.5, 0.75 and 1 s at the most
    assert all(f["reason"] == why.format(f["attempts"]) and 2 <= f["attempts"] <= 5
               for f in flushes)
    rows = _of(recs, collector="prometheus", type="sample", arm="a") + \
        _of(recs, collector="response_field", type="sample", arm="a")
    assert len(rows) == 2 + 2 * 1 and all(r["metrics"] == {} for r in rows)
    for r in rows:
        (reason,) = r["unavailable"].values()
        assert reason.startswith("the cache flush failed: the server answered success=False")
    md = out.report_md
    assert "Cache flushes: 0 of 4 succeeded (failed: the server answered success=False" in md
    assert "Unavailable: misses_per_token: the cache flush failed" in md


def test_a_cold_replay_after_the_collectors_flush_is_not_flushed_twice(
        tmp_path: Path, results: Path) -> None:
    """The flush collector empties the cache as the window opens; a cold replay flushed
    it again before its first rep, a second request for nothing. Now: one flush a rep,
    the collector's for the first."""
    out = _campaign(tmp_path, results, "vllm", {"a": ["--shapes", str(VLLM_ON)]},
                    collectors=[{"kind": "flush"}], reps=2,
                    workloads=[{"sessions": {"count": 2, "prefix_tokens": 32, "turns": 2,
                                             "user_tokens": 8, "output_tokens": 4,
                                             "rate": 50, "steady": [0, 1]}}])
    recs = [r.data() for r in out.run.records()]
    samples = _of(recs, type="sample", arm="a", workload="sessions")
    assert len(samples) == 2 and all(s["status"] == "ok" for s in samples), samples
    flushes = _of(recs, type="flush", arm="a", workload="sessions")
    assert len(flushes) == 2 and all(f["ok"] for f in flushes), flushes


def test_vllm_flush_without_dev_mode_says_what_it_needs(tmp_path: Path,
                                                        results: Path) -> None:
    out = _campaign(tmp_path, results, "vllm", {"a": ["--shapes", str(VLLM_NO_DEV)]},
                    collectors=[{"kind": "flush"}], contexts=(64,))
    (f,) = _of([r.data() for r in out.run.records()], type="flush", arm="a")
    assert not f["ok"] and f["reason"] == ('HTTP 404: {"detail":"Not Found"} (the endpoint '
                                           "needs VLLM_SERVER_DEV_MODE=1 in the server's "
                                           "environment)")


# ------------------------------------ vLLM per-request metrics, fingerprints


def test_vllm_per_request_metrics_are_the_timing_cross_check(tmp_path: Path,
                                                             results: Path) -> None:
    # the life recorded with --enable-per-request-metrics: its usage chunk's metrics
    # block (generation_time_ms measured here) and system_fingerprint
    out = _campaign(tmp_path, results, "vllm", {"a": ["--shapes", str(VLLM_NO_DEV)]},
                    collectors=[], rounds=2, defaults={"request_timeout": 30})
    recs = [r.data() for r in out.run.records()]
    samples = _of(recs, type="sample", arm="a")
    assert len(samples) == 4 and all(s["metrics"]["server_decode_tok_s"] > 0 for s in samples)
    assert all(s["server_metrics"]["generation_time_ms"] > 0 for s in samples)
    md = out.report_md
    assert "Client/server timing agreement: median |client/server - 1| = " in md
    assert "samples (server = vLLM metrics.generation_time_ms)." in md
    fps = _of(recs, type="system_fingerprint")
    assert len(fps) == 4  # one per server life
    assert all(f["fingerprints"] == ["vllm-0.32.0-b7b418ee"] for f in fps)


# ------------------------------------------- counters a build lacks, sources


def test_counters_missing_read_once_per_life_and_named_in_the_report(
        tmp_path: Path, results: Path) -> None:
    # the reference server's llama.cpp /metrics has prompt_tokens and tokens_predicted
    # only: the preset's prompt_tokens_cached and n_decode are missing in this build
    out = _campaign(tmp_path, results, "llama.cpp", {"a": [], "b": []}, rounds=2,
                    collectors=[{"kind": "prometheus"},
                                {"kind": "response_field", "name": "misses_per_token_t",
                                 "label": "misses/token (timings)"}])
    recs = [r.data() for r in out.run.records()]
    counters = _of(recs, type="counters")
    assert len(counters) == 4  # once per server life
    assert {(c["arm"], c["round"]) for c in counters} == {(a, r) for a in "ab" for r in (0, 1)}
    assert all(c["ok"] and c["missing"] == ["llamacpp:n_decode_total",
                                            "llamacpp:prompt_tokens_cached_total"]
               for c in counters)
    md = out.report_md
    for arm in "ab":
        assert (f"Counters missing: arm {arm}'s server does not expose llamacpp:n_decode_total, "
                "llamacpp:prompt_tokens_cached_total (read once per server life).") in md
    assert "Source of misses_per_token: prometheus: llamacpp:prompt_tokens_total." in md
    assert "Source of misses_per_token_t: response: timings.cache_n." in md


def test_a_build_with_every_counter_has_no_missing_note(tmp_path: Path,
                                                        results: Path) -> None:
    out = _campaign(tmp_path, results, "vllm", {"a": ["--shapes", str(VLLM_ON)]},
                    collectors=[{"kind": "prometheus"}], contexts=(64,))
    (c,) = _of([r.data() for r in out.run.records()], type="counters", arm="a")
    assert c["ok"] and c["missing"] == []
    assert "Counters missing" not in out.report_md
    assert ("Source of misses_per_token: prometheus: vllm:prompt_tokens_total - "
            "vllm:prompt_tokens_cached_total.") in out.report_md


# ------------------------------------------ misses/token, both sources, per server


@pytest.mark.parametrize(("shapes", "flags", "preset"),
                         [(VLLM_ON, ["--prompt-tokens-details"], "vllm"),
                          (VLLM_OFF, ["--prompt-tokens-details"], "vllm"),
                          (SGLANG, [], "sglang"), (SGLANG, ["--no-cache"], "sglang")])
def test_misses_per_token_from_counters_and_usage_agree(
        tmp_path: Path, results: Path, shapes: Path, flags: list[str], preset: str) -> None:
    # each window: the same prompt twice (warm-up aside: reps 2 of one prompt maker
    # give new prompts, so a second run of the same row is what hits); here every
    # prompt is new after the flush: misses = context, with the cache on or off, and
    # SGLang's cached_tokens_total (absent until the first hit) reads 0 meanwhile
    out = _campaign(tmp_path, results, preset, {"a": ["--shapes", str(shapes), *flags]},
                    collectors=[{"kind": "flush"}, {"kind": "prometheus"},
                                {"kind": "response_field", "name": "misses_per_token_usage"}])
    recs = [r.data() for r in out.run.records()]
    assert all(f["ok"] for f in _of(recs, type="flush", arm="a"))
    prom = {r["workload"]: r["metrics"].get("misses_per_token")
            for r in _of(recs, collector="prometheus", type="sample", arm="a")}
    usage: dict[str, list[float]] = {}
    for r in _of(recs, collector="response_field", type="sample", arm="a"):
        usage.setdefault(r["workload"], []).append(r["metrics"]["misses_per_token_usage"])
    assert prom == {"decode 64": 4.0, "decode 128": 8.0}, recs
    assert {k: sum(v) / len(v) for k, v in usage.items()} == prom
    (c,) = _of(recs, type="counters", arm="a")
    assert c["missing"] == []
    tpl = out.run.meta()["request_templates"]["a"]["workloads"]["decode"]
    for k, v in {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                 "top_k": -1, "min_p": 0.0, "seed": 0, "temperature": 0, "top_p": 1,
                 "min_tokens": 16, "ignore_eos": True}.items():
        assert tpl[k] == v, (k, tpl)


@pytest.mark.parametrize("shapes", [VLLM_ON, SGLANG])
def test_misses_per_token_sources_agree_with_side_calls(tmp_path: Path, results: Path,
                                                        shapes: Path) -> None:
    # one window: a long decode and its side calls; both sources count the side calls'
    # prompt tokens and their decoded tokens (the H200's 817.6 against 816.0)
    out = _campaign(tmp_path, results, "vllm" if shapes == VLLM_ON else "sglang",
                    {"a": ["--shapes", str(shapes), "--prompt-tokens-details", "--rate", "40"]},
                    collectors=[{"kind": "flush"}, {"kind": "prometheus"},
                                {"kind": "response_field", "name": "misses_per_token_usage"}],
                    workloads=[{"contexts": [96], "decode_tokens": 32, "side_calls": {
                        "count": 2, "prompt_tokens": 24, "max_tokens": 8, "delay": 0.05}}])
    recs = [r.data() for r in out.run.records()]
    (sample,) = _of(recs, type="sample", arm="a", collector=None)
    assert [c["ok"] for c in sample["side_calls"]] == [True, True], sample
    (prom,) = _of(recs, collector="prometheus", type="sample", arm="a")
    (resp,) = _of(recs, collector="response_field", type="sample", arm="a")
    # the side calls' prompts share their first words (a cached prefix of a few tokens)
    cached = sum(c["usage"]["prompt_tokens_details"]["cached_tokens"]
                 for c in [sample, *sample["side_calls"]])
    assert 0 <= cached < 24
    want = (96 + 2 * 24 - cached) / (32 + 2 * 8)
    assert prom["metrics"]["misses_per_token"] == pytest.approx(want, rel=1e-12)
    assert resp["metrics"]["misses_per_token_usage"] == pytest.approx(want, rel=1e-12)


if sys.platform != "linux":  # /dev/shm and /proc
    pytestmark = pytest.mark.skip("Linux only")
