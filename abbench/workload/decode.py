"""Workload client: exact-length prompts, exact-length greedy decodes, SSE timing.

decode tok/s = (completion_tokens - 1) / (t_last - t_first), from the arrival
times of the first and last content chunks (chunks are not tokens). This is the
quantity llama.cpp reports as ``timings.predicted_per_second`` and that vLLM's
and SGLang's own clients report (inverted) as TPOT.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from abbench.config.arms import ResolvedArm
from abbench.config.presets import arm_preset
from abbench.config.workloads import Workload
from abbench.errors import RequestError
from abbench.server.http import Reply, Transport, TransportError
from abbench.workload import wire
from abbench.workload.wire import WireError

_WORDS = (  # noqa: SIM905 - one word list, kept readable
    "the of and to in is was that for on as with by at from his her which this be are "
    "had have not but were all they one there been has their more when will would who "
    "time about into some could them other than then now only its after also two first "
    "over new years way may many most where through before must back down should because "
    "each those people well long state under never same another know while last might "
    "great old year off come since against go came right used take three himself few "
    "house world use during without again place around however home small found thought "
    "went say part once general high upon school every don does got united left number "
    "course war until always away something fact though water less public put think "
    "almost hand enough far took head yet government system better set told nothing "
    "night end why called didn eyes find going look asked later knew point next program "
    "city business give group toward young days let room president side social given "
    "present "
).split()


def filler_text(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    for i in range(12, n_words, 13):
        words[i] += "."
    return " ".join(words)


@dataclass
class StreamResult:
    """What one streamed completion returned, with client-side timings (perf_counter s).

    ``usage`` and ``timings`` hold what the server sent, checked by :mod:`.wire`
    (counts are integers >= 0, rates finite)."""

    t_send: float
    t_first: float | None = None
    t_last: float | None = None
    t_end: float | None = None
    chunks: int = 0
    #: chunks that carried text, and the reads (arrival times) they came in
    content_chunks: int = 0
    reads: int = 0
    text: str = ""
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def completion_tokens(self) -> int | None:
        if self.usage.get("completion_tokens") is not None:
            return int(self.usage["completion_tokens"])
        if self.timings.get("predicted_n") is not None:
            return int(self.timings["predicted_n"])
        return None

    @property
    def prompt_tokens(self) -> int | None:
        if self.usage.get("prompt_tokens") is not None:
            return int(self.usage["prompt_tokens"])
        if self.timings.get("prompt_n") is not None:
            return int(self.timings["prompt_n"]) + int(self.timings.get("cache_n") or 0)
        return None

    @property
    def ttft(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_send

    def decode_tok_s(self) -> float | None:
        n = self.completion_tokens
        if n is None or n < 2 or self.t_first is None or self.t_last is None:
            return None
        dt = self.t_last - self.t_first
        return (n - 1) / dt if dt > 0 else None


def parse_sse(chunks: Iterator[bytes], result: StreamResult, clock=time.perf_counter,
              on_first: Callable[[], None] | None = None,
              max_content: int | None = None) -> None:
    """Consume an SSE byte stream of OpenAI completion chunks into ``result``.

    Every ``data:`` event is parsed by :class:`.wire.SseReader`; a malformed one raises a
    WireError naming it (``stream chunk 3: choices is a string``). ``max_content``:
    content chunks beyond this fail the request (a stream that never ends). Kept
    free of I/O so that the client-capacity benchmark can drive it at full speed.
    """
    reader = wire.SseReader()
    texts: list[str] = []
    content = 0
    for data in chunks:
        now = clock()
        batch = reader.feed(data)
        for k, chunk in enumerate(batch, start=reader.events - len(batch) + 1):
            result.chunks += 1
            for choice in chunk.choices or ():
                text = choice.content
                if text:
                    content += 1
                    if max_content is not None and content > max_content:
                        raise WireError(f"stream chunk {k}: the stream went on "
                                        f"past {max_content} content chunks")
                    if result.t_first is None:
                        result.t_first = now
                        if on_first is not None:
                            on_first()
                    if result.t_last != now:
                        result.reads += 1
                    result.t_last = now
                    result.content_chunks += 1
                    texts.append(text)
                if choice.finish_reason:
                    result.finish_reason = choice.finish_reason
            if chunk.usage is not None:
                result.usage = wire.dump(chunk.usage)
            if chunk.timings is not None:
                result.timings = wire.dump(chunk.timings)
            if chunk.meta_info is not None:
                result.extra["meta_info"] = chunk.meta_info
            if chunk.metrics:  # vLLM --enable-per-request-metrics, on the usage chunk
                result.extra["server_metrics"] = chunk.metrics
            if chunk.system_fingerprint:
                result.extra["system_fingerprint"] = chunk.system_fingerprint
        if reader.done and result.t_end is None:
            result.t_end = now
    reader.close()
    result.text = "".join(texts)
    if result.t_end is None:
        result.t_end = clock()


class Client:
    """Talks to one running server through its preset's endpoints: every workload
    request, and the collectors' metrics scrapes and cache flushes, go through its
    :class:`~abbench.server.http.Transport`."""

    def __init__(self, base_url: str, arm: ResolvedArm):
        self.base_url = base_url
        self.arm = arm
        self.preset = arm_preset(arm)
        self.http = Transport(base_url)
        self._prefix: list[int] | None = None

    def close(self) -> None:
        self.http.close()

    # ---------------------------------------------------------------- tokenize
    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        path = self.arm.tokenize_path
        if not path:
            raise RequestError(f"arm {self.arm.name} has no tokenize endpoint",
                               hint="set tokenize_path: (or a preset) so prompts have exact "
                                    "lengths")
        if self.preset.tokenize_field == "content":
            body: dict[str, Any] = {"content": text, "add_special": add_special}
        else:
            body = {"prompt": text, "add_special_tokens": add_special}
        try:
            r = self.http.post(path, body, timeout=self.arm.request_timeout)
            if r.status != 200:
                raise RequestError(f"HTTP {r.status}: {r.excerpt()}")
            return wire.parse(wire.Tokenized, r.body, "the answer").ids()
        except RequestError as e:
            raise RequestError(f"tokenize failed at {path}: {e.message}",
                               hint="check tokenize_path for this server") from None

    def special_prefix(self) -> list[int]:
        """Tokens the server would put before a text prompt (BOS), added to id prompts."""
        if self._prefix is None:
            if self.preset.prepend_bos:
                with_special = self.tokenize("x", add_special=True)
                without = self.tokenize("x", add_special=False)
                k = len(with_special) - len(without)
                self._prefix = with_special[:k] if k > 0 and with_special[k:] == without else []
            else:
                self._prefix = []
        return self._prefix

    def props(self) -> dict[str, Any] | None:
        if not self.arm.props_path:
            return None
        try:
            r = self.http.get(self.arm.props_path, timeout=10)
            if r.status != 200:
                return None
            data = wire.parse(wire.Props, r.body, "props").model_dump()
        except RequestError:
            return None
        if isinstance(data, dict):
            data.pop("chat_template", None)  # large and not about speed
            data.pop("chat_template_tool_use", None)
        return data

    # ------------------------------------------------- other calls (collectors)
    def get(self, path: str, *, timeout: float = 10) -> Reply:
        """GET ``path`` (a metrics scrape); raises RequestError when no answer came."""
        return self.http.get(path, timeout=timeout)

    def call(self, method: str, path: str, body: Any = None, *, timeout: float) -> Reply:
        """Any other request (a cache flush, a greedy completion)."""
        return self.http.request(method, path, json=body, timeout=timeout)

    # -------------------------------------------------------------- completion
    def request_body(self, prompt: list[int] | str, max_tokens: int, *,
                     exact: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "top_p": 1,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if exact:
            body["ignore_eos"] = True
        for k, v in self.arm.request_extra.items():
            if v is None:  # preset fields that carry the decode length
                if exact or k == "n_predict":
                    body[k] = max_tokens
            else:
                body[k] = v
        return body

    def complete(self, prompt: list[int] | str, max_tokens: int, *, exact: bool = True,
                 timeout: float | None = None, stop_event: threading.Event | None = None,
                 on_first: Callable[[], None] | None = None,
                 messages: list[dict[str, str]] | None = None,
                 path: str | None = None) -> StreamResult:
        """One streamed completion of ``prompt``, or of chat ``messages`` sent to
        ``path`` (a chat endpoint)."""
        body = self.request_body(prompt, max_tokens, exact=exact)
        if messages is not None:
            body.pop("prompt")
            body["messages"] = messages
        timeout = timeout or self.arm.request_timeout
        result = StreamResult(t_send=time.perf_counter())
        try:
            with self.http.stream(path or self.arm.completions_path, body,
                                  timeout=timeout) as s:
                if s.status != 200:
                    raise RequestError(f"HTTP {s.status}: {s.excerpt()}")
                deadline = result.t_send + timeout
                parse_sse(_until(s.pieces(), deadline, stop_event), result, on_first=on_first,
                          max_content=2 * max_tokens + 16)
        except TransportError as e:
            if e.message.startswith("timed out"):
                raise RequestError(f"timed out: no data for {timeout:g} s (request_timeout)",
                                   hint="the server may hang; raise request_timeout if it is "
                                        "just slow") from None
            raise
        return result


def _until(it: Iterator[bytes], deadline: float, stop: threading.Event | None) -> Iterator[bytes]:
    for data in it:
        yield data
        if time.perf_counter() > deadline:
            raise RequestError("the request ran past request_timeout")
        if stop is not None and stop.is_set():
            raise RequestError("stopped")


# ----------------------------------------------------------------- prompts


class PromptMaker:
    """Builds exact-length token-id prompts with a unique nonce at the start.

    The nonce (random, from the run's seed) sits right after the special prefix,
    so no two requests share a cacheable prefix: no rep measures the prefix cache.
    """

    def __init__(self, client: Client, *, seed: int, source_text: str | None = None):
        self.client = client
        self.rng = random.Random(seed)
        self._filler: list[int] | None = None
        self._source_text = source_text

    def filler(self, n: int) -> list[int]:
        if self._filler is None:
            text = self._source_text or filler_text(3000, seed=1)
            ids = self.client.tokenize(text, add_special=False)
            if not ids:
                raise RequestError("the prompt text tokenized to nothing")
            self._filler = ids
        out: list[int] = []
        while len(out) < n:
            out.extend(self._filler[: n - len(out)])
        return out

    def nonce(self) -> str:
        return f"{self.rng.getrandbits(64):016x}"

    def prompt(self, length: int) -> tuple[list[int], str]:
        prefix = self.client.special_prefix()
        nonce = self.nonce()
        nonce_ids = self.client.tokenize(f"Request {nonce}.\n", add_special=False)
        head = prefix + nonce_ids
        if length < len(head) + 1:
            raise RequestError(f"context {length} is shorter than the prompt's head "
                               f"({len(head)} tokens)", hint="use a longer context")
        return head + self.filler(length - len(head)), nonce


# -------------------------------------------------------------- one decode


@dataclass
class DecodeOutcome:
    """One measured long decode (and its side calls), ready to be stored."""

    valid: bool
    reason: str | None
    metrics: dict[str, float]
    detail: dict[str, Any]


def measure(result: StreamResult, *, prompt_len: int, decode_tokens: int) -> DecodeOutcome:
    reasons = []
    pt, ct = result.prompt_tokens, result.completion_tokens
    if pt is None or ct is None:
        reasons.append("the server sent no usage (prompt/completion token counts)")
    else:
        if pt != prompt_len:
            reasons.append(f"prompt_tokens {pt} != {prompt_len}")
        if ct != decode_tokens:
            reasons.append(f"completion_tokens {ct} != {decode_tokens}")
    reasons += _self_checks(result)
    metrics: dict[str, float] = {}
    tps = result.decode_tok_s()
    if tps is not None:
        metrics["decode_tok_s"] = tps
    elif not reasons:
        if result.content_chunks >= 2 and result.reads < 2:
            reasons.append(f"all {result.content_chunks} content chunks arrived in one read "
                           "(the server sent the stream at once, or a proxy buffered it): "
                           "no decode rate")
        else:
            reasons.append(f"{result.content_chunks} content chunk(s): at least two are "
                           "needed for a decode rate")
    if result.ttft is not None:
        metrics["ttft_ms"] = result.ttft * 1e3
        if result.ttft > 0:
            metrics["prefill_tok_s"] = prompt_len / result.ttft
    t = result.timings
    if t.get("predicted_per_second"):
        metrics["server_decode_tok_s"] = float(t["predicted_per_second"])
    if t.get("prompt_per_second"):
        metrics["server_prefill_tok_s"] = float(t["prompt_per_second"])
    gen_ms = (result.extra.get("server_metrics") or {}).get("generation_time_ms")
    if "server_decode_tok_s" not in metrics and gen_ms and ct and ct > 1:
        # vLLM: generation_time_ms = last token - first token, the client's own interval
        metrics["server_decode_tok_s"] = (ct - 1) / (float(gen_ms) / 1e3)
    detail = {
        "prompt_tokens": pt,
        "completion_tokens": ct,
        "chunks": result.chunks,
        "content_chunks": result.content_chunks,
        "finish_reason": result.finish_reason,
        "usage": result.usage or None,
        "timings": result.timings or None,
        "t_first_s": None if result.t_first is None else result.t_first - result.t_send,
        "t_last_s": None if result.t_last is None else result.t_last - result.t_send,
    }
    if result.extra:
        detail.update(result.extra)
    return DecodeOutcome(valid=not reasons, reason="; ".join(reasons) or None, metrics=metrics,
                         detail=detail)


#: slack of the timings check: the server's clock and ours, and a scheduler tick
_TIMING_SLACK_S = 0.05


def _self_checks(result: StreamResult) -> list[str]:
    """Where the server's answer contradicts itself: more content chunks than
    completion tokens (a chunk carries one token or more, never less), the usage and
    llama.cpp's timings counting different tokens, or timings claiming more decode
    time than the whole stream took on our side."""
    out = []
    ct = result.completion_tokens
    if ct is not None and result.content_chunks > ct:
        out.append(f"the server streamed {result.content_chunks} content chunks but its "
                   f"usage says {ct} completion tokens (a chunk carries at least one token)")
    t, u = result.timings, result.usage
    pn, un = t.get("predicted_n"), u.get("completion_tokens")
    if pn is not None and un is not None and pn != un:
        out.append(f"timings.predicted_n {pn} != usage.completion_tokens {un}")
    ms, end = t.get("predicted_ms"), result.t_end
    if ms is not None and end is not None:
        wall = end - result.t_send
        if ms / 1e3 > wall + _TIMING_SLACK_S:
            out.append(f"timings.predicted_ms {ms:.0f} is longer than the whole stream "
                       f"took here ({wall * 1e3:.0f} ms)")
    return out


def run_decode(client: Client, prompts: PromptMaker, workload: Workload, context: int,
               stop_event: threading.Event | None = None) -> DecodeOutcome:
    """One long decode of ``workload.decode_tokens`` at ``context``, with side calls if set."""
    ids, nonce = prompts.prompt(context)
    side = workload.side_calls
    if side is None:
        result = client.complete(ids, workload.decode_tokens, stop_event=stop_event)
        out = measure(result, prompt_len=context, decode_tokens=workload.decode_tokens)
        out.detail["nonce"] = nonce
        return out

    side_prompts = [prompts.prompt(side.prompt_tokens)[0] for _ in range(side.count)]
    first_token = threading.Event()
    latencies: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one_side(i: int) -> None:
        t0 = time.perf_counter()
        try:
            r = client_side.complete(side_prompts[i], side.max_tokens, stop_event=stop_event)
            rec: dict[str, Any] = {
                "i": i, "ok": True, "latency_ms": (time.perf_counter() - t0) * 1e3,
                "ttft_ms": None if r.ttft is None else r.ttft * 1e3,
                "completion_tokens": r.completion_tokens, "prompt_tokens": r.prompt_tokens,
                "usage": r.usage or None, "timings": r.timings or None}
        except RequestError as e:
            rec = {"i": i, "ok": False, "error": e.message,
                   "latency_ms": (time.perf_counter() - t0) * 1e3}
        with lock:
            latencies.append(rec)

    def driver() -> None:
        first_token.wait(timeout=client.arm.request_timeout)
        time.sleep(side.delay)
        with ThreadPoolExecutor(max_workers=side.concurrency) as pool:
            for i in range(side.count):
                if stop_event is not None and stop_event.is_set():
                    break
                pool.submit(one_side, i)
                if side.interval:
                    time.sleep(side.interval)

    client_side = Client(client.base_url, client.arm)
    t = threading.Thread(target=driver, name="side-calls", daemon=True)
    t.start()
    try:
        result = client.complete(ids, workload.decode_tokens, stop_event=stop_event,
                                 on_first=first_token.set)
    finally:
        first_token.set()
        t.join(timeout=client.arm.request_timeout)
        client_side.close()
    out = measure(result, prompt_len=context, decode_tokens=workload.decode_tokens)
    latencies.sort(key=lambda r: r["i"])
    ok = [r["latency_ms"] for r in latencies if r["ok"]]
    if ok:
        out.metrics["side_call_ms"] = sum(ok) / len(ok)
    out.detail["side_calls"] = latencies
    out.detail["nonce"] = nonce
    if len(ok) < side.count:
        out.detail["side_call_failures"] = side.count - len(ok)
    return out
