"""Issue 17, item by item, on the recorded real answers in tests/ref/shapes/."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from abbench.collectors import counters
from abbench.collectors.counters import counter_value, flush_once, metric_names_in, request_misses
from abbench.config.presets import LLAMA_CPP, SGLANG, VLLM
from abbench.model.records import parse_record
from abbench.server.http import Reply
from abbench.server.process import remove_stale_shm
from abbench.workload.decode import StreamResult, measure, parse_sse

SHAPES = Path(__file__).parents[1] / "ref" / "shapes"
VLLM_DIR = SHAPES / "vllm-0.32.0"


def _text(*parts: str) -> str:
    return (SHAPES.joinpath(*parts)).read_text()


def _Resp(status: int, body: str) -> Reply:
    return Reply(status, body.encode())


# 1. /reset_prefix_cache: read success, retry for a bounded time, say why it failed
def test_flush_reads_success_and_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    real = json.loads(_text("vllm-0.32.0", "dev-mode-prefix-caching-on", "flush.json"))
    answers = [_Resp(200, '{"success":false}'), _Resp(200, '{"success":false}'),
               _Resp(real["status"], real["body"])]
    out = flush_once(lambda: answers.pop(0), VLLM, sleep=lambda s: None)
    assert out["ok"] is True and out["attempts"] == 3


def test_flush_fails_when_success_stays_false(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked again every 0.25 s until flush_retry_s has passed (on a clock the waits
    advance): at 0, 0.25 and 0.5 s, then no more."""
    preset = VLLM.__class__(**{**VLLM.__dict__, "flush_retry_s": 0.3})
    clock = [0.0]
    monkeypatch.setattr(counters, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    def sleep(s: float) -> None:
        clock[0] += s

    out = flush_once(lambda: _Resp(200, '{"success":false}'), preset, sleep=sleep)
    assert out["ok"] is False and out["attempts"] == 3 and clock == [0.5]
    assert "success=False after 3 attempt(s) in 0.3 s" in out["reason"]


def test_flush_404_says_dev_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    out = flush_once(lambda: _Resp(404, '{"detail":"Not Found"}'), VLLM)
    assert not out["ok"] and "VLLM_SERVER_DEV_MODE=1" in out["reason"]


def test_sglang_flush_is_plain_text_200() -> None:
    rec = json.loads(_text("sglang-0.5.23", "default", "flush.json"))
    assert rec["status"] == 200 and SGLANG.flush_success_field is None


# 2. misses with prefix caching off: prompt_tokens - prompt_tokens_cached, not queries - hits
@pytest.mark.parametrize(("life", "repeat_misses"), [("dev-mode-prefix-caching-off", 400),
                                                     ("dev-mode-prefix-caching-on", 16)])
def test_vllm_misses_counters(life: str, repeat_misses: float) -> None:
    a, b = (_text("vllm-0.32.0", life, f) for f in ("metrics_1_after_first.txt",
                                                      "metrics_2_after_repeat.txt"))
    assert VLLM.misses_counter and VLLM.misses_minus_counter

    def misses(t: str) -> float:
        return (counter_value(t, VLLM.misses_counter or "")
                - counter_value(t, VLLM.misses_minus_counter or ""))
    assert misses(b) - misses(a) == repeat_misses


# 3. neutral sampling fields for every preset, with each server's names
def test_neutral_sampling_fields() -> None:
    for p in (VLLM, SGLANG):
        for k in ("repetition_penalty", "presence_penalty", "frequency_penalty", "top_k",
                  "min_p", "seed"):
            assert k in p.request_extra, (p.name, k)
    for k in ("repeat_penalty", "presence_penalty", "frequency_penalty", "top_k", "min_p",
              "seed"):
        assert k in LLAMA_CPP.request_extra


# 4. SGLang: /server_info first, /get_server_info after; a 30 s hang probe
def test_sglang_server_info_and_probe() -> None:
    info = json.loads(_text("sglang-0.5.23", "default", "server_info.json"))
    assert SGLANG.props_path == "/server_info"
    assert SGLANG.props_fallback_paths == ("/get_server_info",)
    assert SGLANG.hang_probe_timeout_s == 30.0 and VLLM.hang_probe_timeout_s == 5.0
    assert info  # recorded: both paths answer


# 5. vLLM per-request metrics: the server side of the timing cross-check, fingerprint
def test_vllm_per_request_metrics_give_server_decode_rate() -> None:
    raw = (VLLM_DIR / "no-dev-mode-per-request-metrics" / "completion_stream.sse").read_bytes()
    r = StreamResult(t_send=0.0)
    ticks = iter(range(10**6))
    parse_sse(iter([raw]), r, clock=lambda: float(next(ticks)))
    assert r.extra["system_fingerprint"] == "vllm-0.32.0-b7b418ee"
    out = measure(r, prompt_len=400, decode_tokens=64)
    assert out.metrics["server_decode_tok_s"] == pytest.approx(63 / 3.359354, rel=1e-6)
    assert out.detail["server_metrics"]["generation_time_ms"] > 0


# 6. one definition: both sources agree on one window with side calls
AT = {"type": "sample", "arm": "a", "round": 0, "workload": "decode 1K"}


def test_misses_per_token_sources_agree() -> None:
    a, b = (_text("vllm-0.32.0", "dev-mode-prefix-caching-on", f) for f in
            ("metrics_0_start.txt", "metrics_2_after_repeat.txt"))
    # the window: the first request (400 prompt, 0 cached) and, as its side call, the
    # repeat (400 prompt, 384 cached): 64 + 64 tokens decoded
    rec = {"prompt_tokens": 400, "completion_tokens": 64,
           "usage": {"prompt_tokens_details": {"cached_tokens": 0}},
           "side_calls": [{"ok": True, "prompt_tokens": 400, "completion_tokens": 64,
                           "usage": {"prompt_tokens_details": {"cached_tokens": 384}}}]}
    per = 128.0
    prom = ((counter_value(b, "vllm:prompt_tokens_total")
             - counter_value(a, "vllm:prompt_tokens_total"))
            - (counter_value(b, "vllm:prompt_tokens_cached_total")
               - counter_value(a, "vllm:prompt_tokens_cached_total"))) / per
    resp, why = request_misses(parse_record({**AT, **rec}), list(VLLM.cached_tokens_fields))
    assert why is None and resp is not None
    assert prom == resp / per == 416 / 128


# 7. llama.cpp: the counters a build exposes
def test_metric_names_in() -> None:
    text = ("# HELP llamacpp:prompt_tokens_total x\n# TYPE llamacpp:prompt_tokens_total "
            "counter\nllamacpp:prompt_tokens_total 5\n")
    names = metric_names_in(text)
    assert "llamacpp:prompt_tokens" in names
    assert "llamacpp:prompt_tokens_cached" not in names
    vllm = metric_names_in(_text("vllm-0.32.0", "dev-mode-prefix-caching-off",
                                 "metrics_0_start.txt"))
    assert {n[:-6] for n in VLLM.metric_names.values()} <= vllm


# SGLang's cached_tokens_total: labelled, so absent until the first cache hit
def test_sglang_cached_tokens_counter_appears_at_the_first_hit() -> None:
    start = (SHAPES / "sglang-0.5.23" / "default" / "metrics_0_start.txt").read_text()
    assert "sglang:cached_tokens_total" not in start
    assert "sglang:cached_tokens_total" in SGLANG.counters_absent_until_counted
    assert counter_value(start, "sglang:cached_tokens_total", absent=0.0) == 0.0
    with pytest.raises(KeyError, match="not among"):
        counter_value(start, "sglang:cached_tokens_total")
    later = (SHAPES / "sglang-0.5.23" / "default" /
             "metrics_2_after_repeat.txt").read_text()
    assert counter_value(later, "sglang:cached_tokens_total", absent=0.0) == 400.0


# the stop: what a dead server left in /dev/shm
def test_remove_stale_shm(tmp_path: Path) -> None:
    start = time.time()
    old = tmp_path / "psm_old"
    old.write_bytes(b"x")
    os.utime(old, (start - 100, start - 100))
    (tmp_path / "psm_new").write_bytes(b"x" * 2048)
    (tmp_path / "sglang_loads_1.shm").write_bytes(b"x")
    (tmp_path / "other").write_bytes(b"x")
    removed = remove_stale_shm(start, str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "psm_old"]
    assert any(r.startswith("psm_new") for r in removed)


# port: auto: below the ephemeral range, where the server's own processes take none
def test_free_port_is_below_the_ephemeral_range(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from abbench.server import ports

    low = ports.ephemeral_low()
    drawn = {ports.free_port("127.0.0.1") for _ in range(20)}
    assert all(ports.AUTO_PORT_LOW <= p < low for p in drawn), drawn
    assert len(drawn) > 1  # drawn at random: two runs at once rarely meet
    for p in drawn:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # free
    rng = tmp_path / "range"
    rng.write_text("30010\t60999\n")
    assert ports.ephemeral_low(str(rng)) == 30010
    assert ports.ephemeral_low(str(tmp_path / "none")) == 32768
    # no room below the range: bind(0) as before (the kernel's own ephemeral port)
    monkeypatch.setattr(ports, "ephemeral_low", lambda: 10020)
    assert ports.free_port("127.0.0.1") >= low
