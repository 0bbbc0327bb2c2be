"""CPU per token of the SSE parse, by parser. One command, a table printed:

    .venv/bin/python benchmarks/parse_bench.py [--out FILE]

Streams of 256 one-token content chunks and the usage chunk, shaped as llama.cpp,
vLLM and the reference server send them, fed to the load client's stream parser
(abbench/workload/load.py ``_Stream``: SSE framing, the typed parse, chunk times and
token counts) in two ways: one read per event (a server writing each token) and the
whole stream in one read (a burst). Parsers:

- untyped: json.loads per event and dict lookups, no validation (the load client's
  parser before the typed one);
- typed, kept, per event (before): pydantic ``Chunk.model_validate_json`` per event,
  every unknown field kept on the model (``extra="allow"``), as shipped before;
- typed, per event: the same, unknown fields checked but not kept;
- typed, per read (shipped): those models, the events of one read validated as one
  JSON array; the per-event parse (same checks, same messages) when that array fails.

CPU is process time, the minimum of 15 repeats, every parser in turn within each
repeat (a shared machine's load hits all alike). Goal: the typed parse at most 8 µs
per token.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pydantic import ConfigDict  # noqa: E402

from abbench.campaign.environment import cpu_model  # noqa: E402
from abbench.workload import wire  # noqa: E402
from abbench.workload.load import LoadJob, LoadResult, _Stream  # noqa: E402

N = 256
SHAPES = {
    "llama.cpp": (b'{"choices":[{"text":" the","index":0,"logprobs":null,"finish_reason":null}],'
                  b'"created":1733000000,"id":"cmpl-abcdefghijklmnop","model":"m",'
                  b'"system_fingerprint":"b6000-abcdef","object":"text_completion"}',
                  b'{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":256},'
                  b'"timings":{"prompt_n":7,"prompt_ms":1.5,"predicted_n":256,'
                  b'"predicted_ms":900.1,"predicted_per_second":284.4}}'),
    "vLLM": (b'{"id":"cmpl-8f1c","object":"text_completion","created":1733000000,"model":"m",'
             b'"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,'
             b'"stop_reason":null}],"usage":null}',
             b'{"id":"cmpl-8f1c","object":"text_completion","created":1733000000,"model":"m",'
             b'"choices":[],"usage":{"prompt_tokens":7,"total_tokens":263,'
             b'"completion_tokens":256}}'),
    "reference": (b'{"choices": [{"text": " w1", "index": 0, "finish_reason": null}]}',
                  b'{"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 256}}'),
}


class Untyped:
    """The load client's parser before the typed one: json.loads and dict lookups."""

    def __init__(self, res: LoadResult):
        self.res, self.buf, self.done = res, b"", False

    def feed(self, data: bytes, now: float) -> None:
        buf = self.buf + data
        if b"\n" not in data:
            self.buf = buf
            return
        *lines, self.buf = buf.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            obj = json.loads(payload)
            usage = obj.get("usage")
            if any((c.get("text") or (c.get("delta") or {}).get("content"))
                   for c in obj.get("choices") or ()):
                self.res.chunk_t.append(now)
            if usage and "completion_tokens" in usage:
                self.res.completion_tokens = int(usage["completion_tokens"])


def per_event(payload: bytes) -> list[wire.Chunk]:
    return [wire.parse(wire.Chunk, payload, "stream chunk 1")]


def run(parser: str, reads: list[bytes]) -> None:
    res = LoadResult(LoadJob(0, False, b"", ""))
    s: Untyped | _Stream = Untyped(res) if parser == "untyped" else _Stream(res)
    for data in reads:
        s.feed(data, 1.0)


PARSERS = ("untyped", "typed, kept, per event (before)", "typed, per event",
           "typed, per read (shipped)")
_KEEP = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, frozen=True)


class KeptChoice(wire.Choice):
    model_config = _KEEP


class KeptChunk(wire.Chunk):
    model_config = _KEEP
    choices: list[KeptChoice] | None = None  # type: ignore[assignment]


def one_by_one(ps: list[bytes], first: int) -> list[wire.Chunk]:
    return [wire.parse(wire.Chunk, x, f"stream chunk {first + i}") for i, x in enumerate(ps)]


def measure(reads: list[bytes], reps: int) -> dict[str, float]:
    best = dict.fromkeys(PARSERS, float("inf"))
    many: Callable[[list[bytes], int], list[wire.Chunk]] = wire._parse_many
    for _ in range(reps):
        for p in PARSERS:
            chunk = wire.Chunk
            if "per event" in p:
                wire._parse_many = one_by_one  # type: ignore[assignment]
            if "kept" in p:
                wire.Chunk = KeptChunk  # type: ignore[misc]
            t0 = time.process_time()
            for _ in range(20):
                run("untyped" if p == "untyped" else "typed", reads)
            best[p] = min(best[p], (time.process_time() - t0) / 20 / N * 1e6)
            wire._parse_many, wire.Chunk = many, chunk  # type: ignore[assignment, misc]
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for shape, (content, last) in SHAPES.items():
        events = [b"data: " + content + b"\n\n"] * N + [b"data: " + last + b"\n\n",
                                                        b"data: [DONE]\n\n"]
        for how, reads in (("one read per event", events), ("whole stream, one read",
                                                            [b"".join(events)])):
            got = measure(reads, args.reps)
            rows.append(f"| {shape} | {how} | " + " | ".join(f"{got[p]:.2f}" for p in PARSERS)
                        + " |")
    head = (f"SSE parse, {dt.date.today()}, {cpu_model()}, Python "
            f"{platform.python_version()}: `python benchmarks/parse_bench.py`; CPU µs per "
            f"token (streams of {N} one-token chunks), minimum of {args.reps} repeats.\n\n"
            "| server shape | reads | " + " | ".join(PARSERS) + " |\n|---|---|---|---|---|---|")
    text = head + "\n" + "\n".join(rows) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
