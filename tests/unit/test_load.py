"""Load workloads as pure functions: config, percentiles, ITL from chunks, goodput,
arrival times, the SSE parser and the report's notes."""

from __future__ import annotations

import json
import random
import statistics

import numpy as np
import pytest

from abbench.config.loader import config_from_data
from abbench.errors import ConfigError
from abbench.model.load_window import aggregate, chunk_tokens, itl_values, mean_itl, percentile
from abbench.model.metrics import METRICS
from abbench.model.records import parse_records
from abbench.report.markdown import note_text
from abbench.report.notes import load_notes
from abbench.workload.load import LoadJob, LoadResult, _Stream, arrival_times
from abbench.workload.wire import WireError

ARMS = {"arms": [{"name": "a", "start": "x {port}"}, {"name": "b", "start": "x {port}"}]}


def workloads(*wl: dict) -> list:
    return config_from_data({**ARMS, "workloads": list(wl)}, source="arms.yaml").workloads


def test_the_issue_example_parses_into_one_row_per_level() -> None:
    (w,) = workloads({"name": "load", "load": {
        "concurrency": [1, 8, 32], "requests": 64, "prompt_tokens": "2K",
        "output_tokens": 256, "arrival": "closed"}, "slo": {"ttft_ms": 2000, "itl_ms": 50}})
    assert w.kind == "load" and w.load is not None and w.load.prompt_tokens == 2048
    assert [k.workload for k in w.row_keys()] == ["load c=1", "load c=8", "load c=32"]
    assert [w.load.warmup_for(lv) for lv in w.load.levels()] == [1, 8, 32]
    (o,) = workloads({"load": {"arrival": {"rate": [2, 8], "process": "poisson"}}})
    assert [k.workload for k in o.row_keys()] == ["load rate=2/s", "load rate=8/s"]
    assert o.load is not None and o.load.warmup_for(o.load.levels()[0]) == 1


@pytest.mark.parametrize(("wl", "message"), [
    ({"load": {"requests": 4}}, "a closed-loop load needs concurrency"),
    ({"load": {"concurrency": 2, "arrival": {"rate": [1]}}}, "cap requests in flight"),
    ({"load": {"concurrency": [2]}, "contexts": [64]}, "not contexts: or side_calls:"),
    ({"load": {"concurrency": [2]}, "slo": {}}, "at least one of ttft_ms"),
    ({"contexts": [64], "slo": {"ttft_ms": 1}}, "slo: belongs to a load workload"),
    ({"decode_tokens": 8}, "Field required: contexts"),
    ({"load": {"concurrency": [0]}}, "greater than or equal to 1"),
    ({"load": {"arrival": {"rate": [0]}}}, "greater than 0"),
])
def test_bad_load_workloads_are_refused_with_the_field(wl: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        workloads(wl)
    assert message in str(e.value) and "workloads[0]" in str(e.value)


def test_two_load_workloads_making_one_row_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"both make the row 'load c=4'.*name: load-1"):
        workloads({"load": {"concurrency": 4}}, {"load": {"concurrency": [4, 8]}})


def test_metrics_are_declared_with_headline_rows_only_in_the_table() -> None:
    table = {n for n, s in METRICS.items() if n.startswith("load_") and s.table}
    assert table == {"load_output_tok_s", "load_ttft_p99_ms", "load_goodput"}
    assert METRICS["load_ttft_p99_ms"].direction == "lower"
    assert METRICS["load_output_tok_s"].label == "output"


def test_percentile_is_numpys_linear_interpolation() -> None:
    rng = random.Random(1)
    for n in (1, 2, 5, 64, 1000):
        xs = [rng.expovariate(1) for _ in range(n)]
        for q in (0, 50, 90, 99, 100):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_tokens_per_chunk_reported_one_or_spread() -> None:
    assert chunk_tokens(4, 4) == ([1, 1, 1, 1], "one per chunk")
    assert chunk_tokens(3, 6, [1, 2, 3]) == ([1, 2, 3], "reported")
    assert chunk_tokens(3, 6, [1, 1]) == ([1, 3, 2], "spread")  # counts that do not fit
    assert chunk_tokens(4, 8) == ([1, 3, 2, 2], "spread")
    assert chunk_tokens(1, 5) == ([5], "spread")
    assert chunk_tokens(0, 5) == ([], "no chunks")


def test_itl_spreads_a_chunk_gap_over_its_tokens() -> None:
    assert itl_values([100.0, 110.0, 130.0], [1, 1, 1]) == [10.0, 20.0]
    assert itl_values([100.0, 130.0], [1, 3]) == [10.0, 10.0, 10.0]
    assert mean_itl({"chunk_ms": [100.0, 110.0, 130.0], "completion_tokens": 3}) == 15.0


def req(i: int, *, t0: float, ttft: float, gaps: list[float], warmup: bool = False,
        status: str = "ok") -> dict:
    chunks = [ttft]
    for g in gaps:
        chunks.append(chunks[-1] + g)
    return {"index": i, "warmup": warmup, "t_start": t0, "t_end": t0 + chunks[-1] / 1e3,
            "ttft_ms": ttft, "e2e_ms": chunks[-1], "chunk_ms": chunks,
            "completion_tokens": len(chunks), "status": status, "t_sched": None}


def test_aggregate_of_known_requests() -> None:
    reqs = [req(0, t0=0.0, ttft=999.0, gaps=[999.0] * 3, warmup=True)]  # left out
    reqs += [req(i, t0=1.0 + i * 0.1, ttft=100.0 + i, gaps=[10.0] * 9) for i in range(1, 11)]
    reqs.append({**req(11, t0=1.5, ttft=5.0, gaps=[1.0]), "status": "failed"})
    m, d = aggregate(reqs, {"ttft_ms": 105.5, "itl_ms": None})
    assert d["requests"] == 11 and d["ok"] == 10 and m["load_failed"] == 1
    window = (2.0 + 0.200) - 1.1  # the last end (i = 10) - the first measured send
    assert d["window_s"] == pytest.approx(window)
    assert m["load_output_tok_s"] == pytest.approx(100 / window)
    assert m["load_req_s"] == pytest.approx(10 / window)
    ttfts = [100.0 + i for i in range(1, 11)]
    assert m["load_ttft_p50_ms"] == pytest.approx(statistics.median(ttfts))
    assert m["load_ttft_p99_ms"] == pytest.approx(float(np.percentile(ttfts, 99)))
    assert m["load_itl_p50_ms"] == m["load_itl_p99_ms"] == pytest.approx(10.0)
    assert m["load_e2e_p50_ms"] == pytest.approx(statistics.median(t + 90 for t in ttfts))
    # TTFT <= 105.5: requests 1..5 of 11 measured (the failed one never counts)
    assert m["load_goodput"] == pytest.approx(5 / 11)
    assert m["load_goodput_req_s"] == pytest.approx(5 / window)
    assert m["load_ttft_p50_ms"] <= m["load_ttft_p90_ms"] <= m["load_ttft_p99_ms"]


def test_an_slo_nothing_meets_gives_goodput_zero_and_none_gives_no_goodput() -> None:
    reqs = [req(i, t0=i * 0.1, ttft=50.0, gaps=[5.0] * 4) for i in range(4)]
    m, _ = aggregate(reqs, {"ttft_ms": 1.0})
    assert m["load_goodput"] == 0.0 and m["load_goodput_req_s"] == 0.0
    m, _ = aggregate(reqs, {"itl_ms": 5.0, "e2e_ms": 70.0})
    assert m["load_goodput"] == 1.0
    m, _ = aggregate(reqs, None)
    assert "load_goodput" not in m


def test_aggregate_with_no_request_ok_has_only_the_failures() -> None:
    reqs = [{"index": 0, "warmup": False, "t_start": None, "status": "failed"}]
    m, d = aggregate(reqs)
    assert m == {"load_failed": 1.0} and d["ok"] == 0


def test_constant_and_poisson_arrivals_keep_the_rate_over_the_window() -> None:
    assert arrival_times(2, 3, 4.0, "constant", random.Random(0)) == [0, 0.25, 0.5, 0.75, 1.0]
    t = arrival_times(3, 200, 8.0, "poisson", random.Random(5))
    measured = t[3:]
    assert t[:3] == [0, 0.125, 0.25] and measured[0] == pytest.approx(0.375)
    assert (len(measured) - 1) / (measured[-1] - measured[0]) == pytest.approx(8.0)
    gaps = np.diff(measured)
    assert 0.7 < np.std(gaps) / np.mean(gaps) < 1.3  # exponential: CV 1
    assert arrival_times(3, 200, 8.0, "poisson", random.Random(5)) == t


def stream_of(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode())
                    + b"\n\n" for e in events)


def test_the_parser_times_content_chunks_across_any_split() -> None:
    data = stream_of({"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}],
                                                      "tokens": [5, 6]},
                     {"choices": [{"text": ""}], "timings": {"predicted_n": 3}},
                     {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
                     b"[DONE]")
    for step in (1, 7, len(data)):
        res = LoadResult(LoadJob(0, False, b"", "n"))
        st = _Stream(res)
        for k in range(0, len(data), step):
            st.feed(data[k:k + step], float(k))
        assert len(res.chunk_t) == 2 and st.done
        assert res.completion_tokens == 3 and res.prompt_tokens == 7
        assert not res.reported_ok  # the first chunk said nothing of its tokens


def test_a_request_record_checks_its_lengths_and_says_how_tokens_were_counted() -> None:
    res = LoadResult(LoadJob(3, False, b"", "n"), t_start=10.0, t_end=10.5,
                     chunk_t=[10.1, 10.2, 10.4], prompt_tokens=7, completion_tokens=5,
                     status="ok", reason=None)
    rec = res.record(9.0, prompt_len=7, output_len=5)
    assert rec["t_start"] == 1.0 and rec["ttft_ms"] == pytest.approx(100.0)
    assert rec["chunk_tokens"] == [1, 2, 2] and rec["tokens_per_chunk"] == "spread"
    assert rec["status"] == "ok"
    rec = res.record(9.0, prompt_len=7, output_len=6)
    assert rec["status"] == "invalid" and "completion_tokens 5 != 6" in rec["reason"]


def test_notes_say_how_itl_was_computed_and_what_was_left_out() -> None:
    base = {"arm": "a", "round": 0, "workload": "load c=2"}
    sample = {**base, "type": "sample", "level": "c=2", "valid": True,
              "client_cpu_share": 0.9}
    reqs = [{**base, "type": "load_request", "status": "ok", "tokens_per_chunk": "spread"},
            {**base, "type": "load_request", "status": "failed", "reason": "HTTP 500: x"}]
    notes = [note_text(n) for n in load_notes(parse_records([sample, *reqs]))]
    assert any(n.startswith("Load ITL: in 1 of 1 requests") for n in notes)
    assert any("1 of 2 failed or had the wrong length (HTTP 500: x (x1))" in n for n in notes)
    assert any("the load client used up to 90% of a core" in n for n in notes)
    one = [{**reqs[0], "tokens_per_chunk": "one per chunk"}]
    assert [note_text(n) for n in load_notes(
        parse_records([{**sample, "client_cpu_share": 0.1}, *one]))] == [
        "Load ITL: every chunk carried one token; each gap between two chunks is one "
        "inter-token latency."]
    assert load_notes(parse_records(one)) == []


def test_sweep_points_place_other_arms_by_their_paired_change(tmp_path) -> None:
    from abbench.report.sweep import sweep_points, write_sweep

    meta = {"id": "r", "arms": [{"name": "a"}, {"name": "b"}], "baseline": "a",
            "schedule": [[r, p, arm] for r in range(6) for p, arm in enumerate("ab")]}
    recs: list[dict] = []
    for i, (r, _, arm) in enumerate(meta["schedule"]):
        recs.append({"type": "slot", "slot": i, "arm": arm, "round": r, "status": "ok"})
        for c, tok in ((1, 10.0), (4, 30.0)):
            k = (1.1 * (1 + 0.005 * (-1) ** r) if arm == "b" else 1.0) * (1 + 0.01 * r)
            recs.append({"type": "sample", "slot": i, "arm": arm, "round": r, "valid": True,
                         "workload": f"load c={c}", "level": f"c={c}", "metrics": {
                             "load_output_tok_s": tok * k, "load_ttft_p99_ms": 100.0 * c,
                             "load_itl_p50_ms": 5.0 * c / k}})
    pts = sweep_points(parse_records(recs), meta)
    assert list(pts) == ["load"] and [p.level for p in pts["load"]["a"]] == ["c=1", "c=4"]
    x_a, lo, hi = pts["load"]["a"][1].values["load_output_tok_s"]
    assert lo is None and hi is None
    x_b, lo, hi = pts["load"]["b"][1].values["load_output_tok_s"]
    assert x_b == pytest.approx(1.1 * x_a, rel=0.01) and lo < x_b < hi
    assert write_sweep(parse_records(recs), meta, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").exists()
    slots = parse_records([r for r in recs if r["type"] == "slot"])
    assert not write_sweep(slots, meta, tmp_path / "x.png")


def test_the_load_parser_reads_chunks_as_the_decode_parser_does() -> None:
    """One SSE reader (wire.SseReader) for both clients: a malformed chunk is a
    WireError naming it, never an AttributeError out of the load client."""
    for bad, want in ((b'data: {"choices": "x"}\n', "stream chunk 1: choices is a string"),
                      (b"data: [1, 2]\n", "stream chunk 1 is a list, not an object"),
                      (b'data: {"usage": {"completion_tokens": "3"}}\n',
                       "stream chunk 1: usage.completion_tokens is a string"),
                      (b'data: {"error": {"message": "boom"}}\n',
                       "stream chunk 1: the server reported an error")):
        st = _Stream(LoadResult(LoadJob(0, False, b"", "n")))
        with pytest.raises(WireError, match=want):
            st.feed(bad, 0.0)
    st = _Stream(LoadResult(LoadJob(0, False, b"", "n")))
    st.feed(b'data: {"choices": [{"text": "a"}]}\ndata: {"cho', 0.0)
    with pytest.raises(WireError, match="stream chunk 2: the stream ended inside it"):
        st.reader.close()
