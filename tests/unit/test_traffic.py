"""Traces as data: reading, designed reuse, the generator's statistics, the replay's
metrics, the config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from abbench.config.workloads import Workload
from abbench.errors import ConfigError
from abbench.workload import tracegen
from abbench.workload.sessions import make_plan, replay_metrics, steady_window
from abbench.workload.trace import (
    Segment,
    TokenBook,
    designed_reuse,
    read_mooncake,
    read_sessions,
    shared_prefixes,
    write_jsonl,
)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("kind, params", [
    ("mooncake", {"requests": 1000, "rate": 2.0, "input_mean": 7590, "output_mean": 182,
                  "shared_share": 0.5}),
    ("mooncake", {"requests": 400, "rate": 8.0, "input_mean": 2000, "output_mean": 64,
                  "shared_share": 0.8, "block_tokens": 64, "burstiness": 0.5}),
    ("sessions", {"sessions": 200, "turns": 6, "rate": 0.5, "user_tokens": 300,
                  "output_tokens": 120, "spread": 0.5, "side_share": 0.2}),
])
def test_trace_make_matches_what_was_asked_within_5_percent(tmp_path: Path, kind: str,
                                                            params: dict) -> None:
    rows = tracegen.make_trace(kind, tmp_path / "t.jsonl", 1, params)
    asked = [(name, a, got) for name, a, got in rows if a is not None]
    assert len(asked) >= 5
    for name, a, got in asked:
        if name == "burstiness_cv":  # a sample statistic: 1/sqrt(n) noise
            assert got == pytest.approx(a, rel=0.15), (name, a, got)
        else:
            assert got == pytest.approx(a, rel=0.05), (name, a, got)
    # the same seed writes the same bytes; another seed another trace
    first = (tmp_path / "t.jsonl").read_bytes()
    tracegen.make_trace(kind, tmp_path / "u.jsonl", 1, params)
    tracegen.make_trace(kind, tmp_path / "v.jsonl", 2, params)
    assert (tmp_path / "u.jsonl").read_bytes() == first
    assert (tmp_path / "v.jsonl").read_bytes() != first


def test_trace_make_refuses_options_of_the_other_kind(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="requests is not part of a sessions trace"):
        tracegen.make_trace("sessions", tmp_path / "t.jsonl", 1, {"requests": 3})
    with pytest.raises(ConfigError, match="--shared-share must be below 1"):
        tracegen.make_trace("mooncake", tmp_path / "t.jsonl", 1, {"shared_share": 1.0})
    with pytest.raises(ConfigError, match="--rate must be > 0"):
        tracegen.make_trace("mooncake", tmp_path / "t.jsonl", 1, {"rate": 0.0})


def test_mooncake_blocks_and_designed_reuse(tmp_path: Path) -> None:
    lines = ['{"timestamp": 0, "input_length": 20, "output_length": 3, "hash_ids": [1, 2, 3]}',
             '{"timestamp": 5, "input_length": 18, "output_length": 3, "hash_ids": [1, 2, 4]}',
             "",
             '{"timestamp": 9, "input_length": 16, "output_length": 2, "hash_ids": [1, 5]}']
    path = _write(tmp_path / "t.jsonl", "\n".join(lines) + "\n")
    t = read_mooncake(path, block_tokens=8)
    assert [r.input_length for r in t.requests] == [20, 18, 16]
    assert t.requests[0].segments == (Segment("h1", 8), Segment("h2", 8), Segment("h3", 4))
    assert designed_reuse(t.requests) == [0, 16, 8]
    assert shared_prefixes(t.requests) == [(Segment("h1", 8), Segment("h2", 8))]
    # warm: the shared prefix sent first counts as seen
    assert designed_reuse(t.requests, shared_prefixes(t.requests)) == [16, 16, 8]


@pytest.mark.parametrize("line, message", [
    ("not json", "t.jsonl:1: not JSON"),
    ("[1, 2]", "t.jsonl:1: a line must be a JSON object"),
    ('{"timestamp": 0, "output_length": 3, "hash_ids": [1]}', "input_length is missing"),
    ('{"timestamp": -1, "input_length": 8, "output_length": 3}', "timestamp must be"),
    ('{"input_length": 8, "output_length": 3, "hash_ids": ["a"]}', "hash_ids must be a list"),
    ('{"input_length": 8, "output_length": 3, "hash_ids": [1, 2, 3]}',
     "3 hash_ids of 8 tokens are more than input_length 8 needs"),
])
def test_bad_mooncake_lines_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = _write(tmp_path / "t.jsonl", line + "\n")
    with pytest.raises(ConfigError) as e:
        read_mooncake(path, block_tokens=8)
    assert message in str(e.value)


def test_sessions_turns_carry_their_history(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_jsonl(path, [
        {"session": "a", "turn": 1, "timestamp": 0, "prefix": "sys", "prefix_tokens": 10,
         "input_tokens": 4, "output_tokens": 2},
        {"session": "a", "turn": 2, "think_ms": 5, "input_tokens": 3, "output_tokens": 2},
        {"session": "a", "turn": 2, "side": True, "input_tokens": 5, "output_tokens": 2},
        {"session": "b", "turn": 1, "timestamp": 1, "prefix": "sys", "prefix_tokens": 10,
         "input_tokens": 4, "output_tokens": 2},
    ])
    t = read_sessions(path)
    a1, a2, side, b1 = t.requests
    assert a2.segments[:3] == (*a1.segments, Segment("s:a:1:a", 2))
    assert a2.input_length == 10 + 4 + 2 + 3 and a2.think_ms == 5
    assert side.side and side.segments[:-1] == (*a2.segments, Segment("s:a:2:a", 2))
    assert b1.segments[0] == a1.segments[0] == Segment("p:sys", 10)
    plan = make_plan(t, "cold")
    # b reuses the shared prefix; turn 2 what turn 1 sent (the designed answer was never
    # sent as a prompt: the server generated its own tokens there); the side call turn 2
    assert [plan.designed[r.index] for r in (a1, b1, a2, side)] == [0, 10, 14, 19]


def test_token_book_equal_keys_are_equal_tokens() -> None:
    book = TokenBook(list(range(100, 200)), seed=7)
    short = book.prompt([Segment("x", 5)], head=[1])
    long = book.prompt([Segment("x", 9), Segment("y", 3)], head=[1])
    assert len(short) == 5 and len(long) == 12 and long[:5] == short
    assert TokenBook(list(range(100, 200)), seed=7).prompt([Segment("x", 9)]) == \
        book.prompt([Segment("x", 9)])
    assert TokenBook(list(range(100, 200)), seed=8).prompt([Segment("x", 9)]) != \
        book.prompt([Segment("x", 9)])


def _rec(i: int, pos: float, turn: int, ttft: float, cached: int | None, designed: int,
         ) -> dict:
    return {"index": i, "warmup": False, "status": "ok", "t_sched": pos, "t_start": pos,
            "t_end": pos + 1, "ttft_ms": ttft, "e2e_ms": 1000.0, "chunk_ms": [ttft, ttft + 10],
            "completion_tokens": 2, "prompt_tokens": 100, "input_length": 100,
            "planned_pos": pos, "turn": turn, "cached_tokens": cached,
            "designed_cached": designed}


def test_replay_metrics_by_turn_hit_rates_and_the_steady_window() -> None:
    recs = [_rec(0, 0.0, 1, 500.0, 0, 0), _rec(1, 0.5, 1, 400.0, 0, 50),
            _rec(2, 0.6, 2, 100.0, 80, 80), _rec(3, 1.0, 2, 90.0, 90, 90)]
    marked = steady_window(recs, (0.1, 0.9))
    assert [r["warmup"] for r in marked] == [True, False, False, True]
    m, d = replay_metrics(recs, steady=(0.1, 0.9), tolerance=0.1, slo=None)
    assert m["trace_ttft_first_p50_ms"] == 400.0 and m["trace_ttft_later_p50_ms"] == 100.0
    assert m["trace_designed_hit_rate"] == pytest.approx(130 / 200)
    assert m["trace_hit_rate"] == pytest.approx(80 / 200)
    assert m["trace_misses_per_token"] == pytest.approx(120 / 4)
    assert d["steady"] == {"share": [0.1, 0.9], "requests": 2, "left_out": 2}
    assert "measured cache hit rate 40.0% against 65.0% designed" in d["cache_warning"]
    m, d = replay_metrics(recs, steady=(0.1, 0.9), tolerance=0.3, slo=None)
    assert "cache_warning" not in d
    recs[1]["cached_tokens"] = None  # a response without the count: no rate, said
    m, d = replay_metrics(recs, steady=(0.1, 0.9), tolerance=0.1, slo=None)
    assert "trace_hit_rate" not in m and "1 of 2 responses" in d["cache_unmeasured"]


def test_workload_config_for_trace_and_sessions() -> None:
    w = Workload.model_validate({"trace": {"file": "t.jsonl", "speed": "2x", "first": "10m"}})
    assert w.kind == "trace" and w.trace is not None
    assert w.trace.speed == 2.0 and w.trace.first == 600.0 and w.trace.cache == "cold"
    assert [k.workload for k in w.row_keys()] == ["trace"]
    s = Workload.model_validate({"name": "chat", "sessions": {"prefix_tokens": "8K"}})
    assert s.kind == "sessions" and s.sessions is not None and s.sessions.prefix_tokens == 8192
    assert s.row_keys()[0].workload == "chat"
    for bad, msg in (({"trace": {"file": "t"}, "contexts": [8]}, "takes its lengths inside"),
                     ({"trace": {"file": "t", "speed": "fast"}}, "is not a speed"),
                     ({"sessions": {"steady": [0.5, 0.2]}}, "steady: is [start, end]"),
                     ({"sessions": {"cache": "hot"}}, "cold"),
                     ({"trace": {"file": "t"}, "sessions": {}}, "takes one trace: mapping")):
        with pytest.raises(ValueError, match=re.escape(msg)):
            Workload.model_validate(bad)


def test_the_h200_trace_is_what_its_command_writes(tmp_path: Path) -> None:
    """arms/traces/h200-mooncake-8k-32k.jsonl is what the command in arms/h200-trace.yaml
    writes (--input-sigma and --output-sigma through the CLI): prompts of 8K-32K tokens,
    shared prefixes of 8K-32K."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    stored = root / "arms" / "traces" / "h200-mooncake-8k-32k.jsonl"
    header = (root / "arms" / "h200-trace.yaml").read_text()
    command = re.search(r"#   abbench trace make (.*?)\n#     (.*?)\n#     -o ", header)
    assert command, "the command is in the arms file's header"
    args = " ".join(command.groups()).replace("\\", "").split()
    out = tmp_path / "t.jsonl"
    p = subprocess.run([sys.executable, "-m", "abbench.cli", "trace", "make", *args,
                        "-o", str(out)], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == stored.read_bytes()
    rows = [json.loads(line) for line in stored.read_text().splitlines()]
    chain = max(-(-r["input_length"] // 512) for r in rows)  # ids below 4 chains: shared
    shared = [512 * sum(1 for i in r["hash_ids"] if i < 4 * chain) for r in rows]
    assert min(shared) >= 8192 and max(r["input_length"] for r in rows) <= 32768, shared
