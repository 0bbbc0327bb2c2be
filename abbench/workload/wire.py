"""What servers answer, typed: the SSE completion chunk with its usage and timings,
the non-streamed completion, the tokenize answer.

Every answer is parsed here before anything reads it. Known fields are strict (a
count is a JSON integer >= 0, a rate a finite number >= 0, a text a string); other
fields pass through untouched, but no value anywhere may be NaN or infinite (they
could not be stored). A malformed answer is a :class:`WireError` naming where it
went wrong in one line: ``stream chunk 3: choices is a string``.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from abbench.errors import RequestError, clip


class WireError(RequestError):
    """A server's answer does not have the shape abbench reads."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, frozen=True)


W = TypeVar("W", bound=_Wire)

Count = Annotated[int, Field(ge=0)]
Rate = Annotated[float, Field(ge=0)]


class Usage(_Wire):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    total_tokens: Count | None = None


class Timings(_Wire):
    """llama.cpp's per-request timings."""

    prompt_n: Count | None = None
    prompt_ms: Rate | None = None
    cache_n: Count | None = None
    predicted_n: Count | None = None
    predicted_ms: Rate | None = None
    prompt_per_second: Rate | None = None
    predicted_per_second: Rate | None = None
    #: speculative decoding (sent only when the request drafted)
    draft_n: Count | None = None
    draft_n_accepted: Count | None = None


class Delta(_Wire):
    content: str | None = None


class Message(_Wire):
    content: str | None = None


class _Read(_Wire):
    """A part read for its known fields alone: the others are checked (valid JSON, no
    NaN or infinity anywhere) but not kept (one stream chunk has a dozen; keeping them
    cost a third of the parse)."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, frozen=True)


class Choice(_Read):
    index: Count | None = None
    text: str | None = None
    delta: Delta | None = None
    message: Message | None = None
    finish_reason: str | None = None
    logprobs: Any = None

    @property
    def content(self) -> str | None:
        """The text this choice streamed: ``text`` (completions) or ``delta.content``
        (chat)."""
        if self.text is None and self.delta is not None:
            return self.delta.content
        return self.text


class Chunk(_Read):
    """One ``data:`` event of a streamed completion."""

    choices: list[Choice] | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    error: Any = None
    meta_info: dict[str, Any] | None = None
    #: vLLM --enable-per-request-metrics: generation_time_ms and friends, on the usage chunk
    metrics: dict[str, Any] | None = None
    system_fingerprint: str | None = None
    #: llama.cpp with ``return_tokens``: the ids this chunk carried
    tokens: list[Any] | None = None


#: the longest SSE line read (a chunk is a few hundred bytes)
MAX_LINE = 1024 * 1024


class SseReader:
    """The ``data:`` events of one streamed completion, fed bytes as they arrive (any
    split): :meth:`feed` returns the complete events as :class:`Chunk` s; ``[DONE]``
    sets ``done``. A malformed event, one the server marks as an error, or a line over
    :data:`MAX_LINE` is a :class:`WireError` naming the event (``stream chunk 3: ...``).
    """

    __slots__ = ("buf", "done", "events")

    def __init__(self) -> None:
        self.buf = b""
        self.events = 0
        self.done = False

    def feed(self, data: bytes) -> list[Chunk]:
        buf = self.buf + data
        if b"\n" not in data:
            if len(buf) > MAX_LINE:
                raise WireError(f"stream chunk {self.events + 1}: a line longer than "
                                f"{MAX_LINE // 1024} KiB")
            self.buf = buf
            return []
        *lines, self.buf = buf.split(b"\n")
        payloads = []
        for line in lines:
            if line[:5] != b"data:":
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            payloads.append(payload)
        first = self.events + 1
        self.events += len(payloads)
        out = _parse_many(payloads, first)
        for k, chunk in enumerate(out, start=first):
            if chunk.error is not None and not chunk.choices:
                raise WireError(f"stream chunk {k}: the server reported an error: "
                                f"{clip(json.dumps(chunk.error), 200)}")
        return out

    def close(self) -> None:
        """The stream ended: a :class:`WireError` if it ended inside a line."""
        if self.buf.strip():
            raise WireError(f"stream chunk {self.events + 1}: the stream ended inside it "
                            f"({clip(repr(self.buf[:60]), 80)})")


_CHUNKS: TypeAdapter[list[Chunk]] = TypeAdapter(list[Chunk])


def _parse_many(payloads: list[bytes], first: int) -> list[Chunk]:
    """The events of one read as chunks, validated as one JSON array (one call into
    pydantic-core for the read, not one per event); the same checks and the same
    messages as :func:`parse` one by one, which runs whenever the array fails, is not
    one value per event, or holds a NaN or infinity anywhere."""
    if len(payloads) > 1:
        joined = b"[" + b",".join(payloads) + b"]"
        if b"NaN" not in joined and b"Infinity" not in joined:
            try:
                chunks = _CHUNKS.validate_json(joined)
            except ValidationError:
                chunks = []
            if len(chunks) == len(payloads):
                return chunks
    return [parse(Chunk, p, f"stream chunk {k}") for k, p in enumerate(payloads, start=first)]


class Completion(_Wire):
    """A non-streamed completion (greedy requests)."""

    choices: Annotated[list[Choice], Field(min_length=1)]
    usage: Usage | None = None


class TokenPiece(_Wire):
    id: Count


class Tokenized(_Wire):
    tokens: list[Count | TokenPiece]

    def ids(self) -> list[int]:
        return [t if isinstance(t, int) else t.id for t in self.tokens]


class Props(_Wire):
    """What a server says about itself (llama.cpp /props): any object of finite values."""


# ------------------------------------------------------------------ parsing


def _what(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "infinite"
    if isinstance(value, (int, float)):
        return f"a number ({clip(value, 40)})"
    if isinstance(value, str):
        return f"a string ({clip(repr(value), 40)})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _loc(parts: tuple[Any, ...]) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif isinstance(p, str) and p not in ("int", "constrained-int", "TokenPiece"):
            out += f".{p}" if out else p
    return out or "the answer"


def _problem(e: ValidationError) -> str:
    """The first problem of a validation error, in words."""
    err = e.errors()[0]
    where, value, kind = _loc(err["loc"]), err.get("input"), err["type"]
    if kind in ("greater_than_equal", "too_short"):
        return f"{where} is {clip(json.dumps(value), 40)}: {err['msg'].lower()}"
    if kind == "missing":
        return f"{where} is missing"
    return f"{where} is {_what(value)}"


def _nonfinite(obj: Any, path: str = "") -> tuple[str, float] | None:
    """The path and value of the first NaN or infinite number in ``obj``, or None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "the answer", obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = _nonfinite(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found = _nonfinite(v, f"{path}[{i}]")
            if found:
                return found
    return None


def parse(model: type[W], raw: bytes, what: str) -> W:
    """``raw`` JSON as ``model``; a :class:`WireError` ``what: problem`` otherwise."""
    try:
        obj = model.model_validate_json(raw)
    except ValidationError as e:
        err = e.errors()[0]
        if err["type"] == "json_invalid":
            raise WireError(f"{what}: not JSON: {clip(repr(raw[:80]), 100)}") from None
        if err["type"] == "model_type":
            raise WireError(f"{what} is {_what(err.get('input'))}, not an object") from None
        raise WireError(f"{what}: {_problem(e)}") from None
    if b"NaN" in raw or b"Infinity" in raw:
        bad = _nonfinite(json.loads(raw))  # in a field abbench does not read itself
        if bad is not None:
            raise WireError(f"{what}: {clip(bad[0], 80)} is {_what(bad[1])}")
    return obj


def dump(obj: _Wire | None) -> dict[str, Any]:
    """A parsed part as the plain data the server sent (unknown fields included)."""
    return {} if obj is None else obj.model_dump(exclude_unset=True)
