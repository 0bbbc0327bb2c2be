"""Speculative-decoding figures from counts, their sources, and the acceptance note."""

from __future__ import annotations

from abbench.config.presets import LLAMA_CPP, SGLANG
from abbench.model.records import DecodeSample, Record
from abbench.quality.speculative import SetTotals, acceptance, set_counts
from abbench.report.acceptance_note import acceptance_notes
from abbench.report.markdown import note_text
from abbench.workload.decode import StreamResult


def test_acceptance_from_counts() -> None:
    m = acceptance({"drafted": 200, "accepted": 150, "steps": 50}, 400)
    assert m == {"spec_drafted_per_token": 0.5, "spec_accept_rate": 0.75,
                 "spec_accept_len": 4.0}
    # nothing drafted: drafted/token is 0, the rate is not 0 but absent
    assert acceptance({"drafted": 0, "accepted": 0, "steps": 0}, 64) == {
        "spec_drafted_per_token": 0.0}
    assert acceptance({"drafted": None, "accepted": None, "steps": None}, 64) == {}


def _result(n: int, timings: dict[str, int], extra: dict[str, object] | None = None
            ) -> StreamResult:
    return StreamResult(t_send=0.0, t_first=1.0, t_last=1.0 + (n - 1) / 50, timings=timings,
                        usage={"completion_tokens": n}, extra=extra or {})


def test_counters_first_then_the_responses() -> None:
    t = SetTotals()
    t.add("a", _result(33, {"draft_n": 40, "draft_n_accepted": 30}), LLAMA_CPP)
    t.add("b", _result(17, {"draft_n": 10, "draft_n_accepted": 2}), LLAMA_CPP)
    assert t.tokens == 50 and t.decode_tokens == 48
    assert abs(t.decode_tokens / t.decode_s - 50) < 1e-9
    counts, source = set_counts(None, None, t)  # no /metrics: the timings' sums
    assert counts == {"drafted": 50, "accepted": 32, "steps": None}
    assert source == {"drafted": "response", "accepted": "response"}
    before = {"drafted": 100.0, "accepted": 60.0, "steps": 20.0}
    after = {"drafted": 150.0, "accepted": 92.0, "steps": 31.0}
    counts, source = set_counts(before, after, t)
    assert counts == {"drafted": 50, "accepted": 32, "steps": 11}
    assert set(source.values()) == {"prometheus"}
    # a request without the field (llama.cpp omits it when nothing was drafted)
    t.add("c", _result(9, {}), LLAMA_CPP)
    assert set_counts(None, None, t)[0]["drafted"] is None


def test_sglang_reads_meta_info() -> None:
    t = SetTotals()
    meta = {"spec_draft_token_num": 30, "spec_accept_token_num": 24, "spec_verify_ct": 10}
    t.add("a", _result(34, {}, {"meta_info": meta}), SGLANG)
    counts, _ = set_counts(None, None, t)
    assert acceptance(counts, t.tokens)["spec_accept_len"] == 3.4


def _sample(arm: str, rnd: int, rate: float, tok_s: float) -> Record:
    return DecodeSample.model_validate({
        "slot": rnd * 2, "arm": arm, "round": rnd, "position": 0, "type": "sample",
        "workload": "speculative code", "valid": True,
        "metrics": {"spec_accept_rate": rate, "decode_tok_s": tok_s}})


def test_note_when_acceptance_varies_more_than_decode_speed() -> None:
    steady = [_sample("a", r, 0.8, 100 + r) for r in range(3)]
    varying = [_sample("b", r, 0.5 + 0.1 * r, 100 + r) for r in range(3)]
    notes = acceptance_notes(steady + varying)
    assert len(notes) == 1 and (notes[0].kind, notes[0].arm) == ("acceptance_varies", "b")
    assert note_text(notes[0]).startswith("speculative code, b: acceptance varies")
