"""The typed parsing layer (abbench/workload/wire.py): every malformed server answer
becomes one line that says where and what, never a crash or a stored NaN."""

from __future__ import annotations

import itertools

import pytest

from abbench.workload import wire
from abbench.workload.decode import StreamResult, parse_sse
from abbench.workload.wire import WireError


def _events(*payloads: bytes) -> list[bytes]:
    return [b"data: " + p + b"\n\n" for p in payloads]


GOOD = [b'{"choices":[{"text":" a","index":0,"finish_reason":null}]}',
        b'{"choices":[{"text":" b","index":0,"finish_reason":"length"}],'
        b'"timings":{"predicted_n":2,"predicted_per_second":50.5,"cache_n":null}}',
        b'{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}', b"[DONE]"]


def _parse(pieces: list[bytes], **kw: object) -> StreamResult:
    clock = itertools.count(1.0, 0.5)
    result = StreamResult(t_send=0.0)
    parse_sse(iter(pieces), result, clock=lambda: next(clock), **kw)  # type: ignore[arg-type]
    return result


def test_a_good_stream_in_any_tearing_is_read_the_same() -> None:
    data = b"".join(_events(*GOOD))
    whole = _parse([data])
    assert (whole.text, whole.prompt_tokens, whole.completion_tokens) == (" a b", 7, 2)
    assert whole.timings == {"predicted_n": 2, "predicted_per_second": 50.5, "cache_n": None}
    for cut in (1, 7, 13, 50):  # split anywhere, even inside "data:" or the JSON
        torn = _parse([data[i:i + cut] for i in range(0, len(data), cut)])
        assert (torn.text, torn.usage, torn.finish_reason) == (whole.text, whole.usage,
                                                                "length")


@pytest.mark.parametrize(("payloads", "message"), [
    ([GOOD[0], b'{"choices": "oops"}'], "stream chunk 2: choices is a string ('oops')"),
    ([b'{"choices": [{"text": 5}]}'], "stream chunk 1: choices[0].text is a number (5)"),
    ([b'{"usage": {"completion_tokens": NaN}}'],
     "stream chunk 1: usage.completion_tokens is NaN"),
    ([b'{"usage": {"prompt_tokens": -3}}'],
     "stream chunk 1: usage.prompt_tokens is -3: input should be greater than or equal to 0"),
    ([b'{"usage": {"prompt_tokens": 7.0}}'], "stream chunk 1: usage.prompt_tokens is a number"),
    ([b'{"usage": {"prompt_tokens": true}}'],
     "stream chunk 1: usage.prompt_tokens is a boolean (true)"),
    ([b'{"timings": {"predicted_per_second": Infinity}}'],
     "stream chunk 1: timings.predicted_per_second is infinite"),
    ([b'{"choices": [], "server_extra": {"x": [1, NaN]}}'],
     "stream chunk 1: server_extra.x[1] is NaN"),
    ([b'{"choices": [{"text": "a"}'], "stream chunk 1: not JSON: b'{\"choices\": "),
    ([b"[1, 2]"], "stream chunk 1 is a list, not an object"),
    ([b'{"error": {"code": 500, "message": "boom"}}'],
     'stream chunk 1: the server reported an error: {"code": 500, "message": "boom"}'),
])
def test_a_malformed_chunk_fails_with_where_and_what(payloads: list[bytes], message: str
                                                     ) -> None:
    with pytest.raises(WireError) as e:
        _parse(_events(*payloads))
    assert e.value.message.startswith(message), e.value.message
    assert "\n" not in e.value.message and len(e.value.message) < 300


def test_streams_that_do_not_end_well() -> None:
    with pytest.raises(WireError, match=r"stream chunk 2: the stream ended inside it"):
        _parse([*_events(GOOD[0]), b'data: {"choi'])
    with pytest.raises(WireError, match=r"stream chunk 1: a line longer than 1024 KiB"):
        _parse([b"data: " + b"x" * 4096] * 300)
    endless = (e for i in itertools.count() for e in _events(GOOD[0]))
    with pytest.raises(WireError, match=r"stream chunk 11: the stream went on past 10 "):
        _parse(endless, max_content=10)  # type: ignore[arg-type]


def test_other_answers() -> None:
    assert wire.parse(wire.Tokenized, b'{"tokens": [1, {"id": 2, "piece": "x"}]}',
                      "t").ids() == [1, 2]
    with pytest.raises(WireError, match=r"^the answer: tokens\[1\] is a string \('a'\)$"):
        wire.parse(wire.Tokenized, b'{"tokens": [1, "a"]}', "the answer")
    with pytest.raises(WireError, match=r"^the answer: choices is missing$"):
        wire.parse(wire.Completion, b'{"text": "hi"}', "the answer")
    with pytest.raises(WireError, match=r"^props: build_info is NaN$"):
        wire.parse(wire.Props, b'{"build_info": NaN}', "props")
