"""A reference inference server with exactly known behaviour, for fast tests.

Speaks the llama.cpp dialect abbench uses: GET /health, POST /tokenize,
POST /v1/completions (SSE), GET /props, GET /metrics. Tokens are words (one id
per whitespace-separated word; id lists are taken as they are).

Behaviour is set by flags:
  --rate R          decode tokens per second (0: as fast as possible)
  --drift D         the rate grows by the factor (1 + D) per request served
  --ttft S          seconds before the first token
  --startup S       seconds of 503 from /health before ready
  --fault KIND      applied to every --fault-every'th completion (or at start-up):
                    http500        an HTTP 500 answer
                    broken         a torn chunk, then the connection drops
                    short          3 tokens fewer than asked
                    hang           stops sending mid-stream (still answers /health)
                    wrong-shape    the 3rd chunk's "choices" is a string
                    nan-usage      usage.completion_tokens is NaN (a bare NaN in the JSON)
                    torn           every event split in two writes mid-JSON (valid SSE)
                    error-mid-stream  an error event (code 500) after half the tokens
                    endless        tokens that never end (no usage, no [DONE])
                    exit-on-start | never-ready   at start-up
                    endless-props  GET /props sends a body that never ends
                    bad-tokenize   POST /tokenize answers {"tokens": "oops"}
                    hang-tokenize  POST /tokenize never answers
                    overstream     half again as many content chunks as the usage and
                                   timings count (a server miscounting its tokens)
                    timings-long   timings.predicted_ms ten times the real decode time
  --fault-first N   the fault only for the first N completions (a failed warm-up)
  --burst           prebuild each stream and send it at once (client-capacity bench)
  --slots N         completions served at once, the rest wait (llama.cpp's -np); 4
  --itl-ms A,B,...  per-token delays in ms, cycled (token i waits the i-th of them
                    after token i-1; instead of --rate): known ITL percentiles
  --stamp           each content chunk carries "t": the server's monotonic clock when
                    it was written (the client-capacity bench's timestamp error)

Playing a recorded real server (tests/ref/shapes/<server>-<version>/<life>/):
  --shapes DIR      answer as the server recorded there did: its tokenize path and
                    answer keys, its stream chunks and final usage chunk (cached_tokens
                    from a prefix cache kept here, vLLM's metrics block and
                    system_fingerprint where recorded), its /metrics text with the
                    misses counters counting, its flush answer (a flush empties the
                    cache), /server_info and /get_server_info (SGLang), /v1/models
  --no-cache        no prefix cache (vLLM --no-enable-prefix-caching, SGLang
                    --disable-radix-cache); a "prefix-caching-off" life implies it
  --prompt-tokens-details  the usage chunk carries prompt_tokens_details.cached_tokens
                    where the life recorded none (vLLM --enable-prompt-tokens-details)
  --flush-false N   the first N flushes answer like vLLM with blocks held
                    (200 {"success": false}); -1: every one
  --missing PATH    this path answers 404 (an endpoint an older build lacks); repeatable
  --health-delay S  after the first completion, each GET /health takes S seconds
                    (SGLang's /health runs a one-token generation)
Stopping (abbench's stop order):
  --stop-log FILE   the main process and its --child append "main|child TERM <t>" and
                    "main exit <t>" (monotonic clock) to FILE
  --child           start a child process in the server's group that waits for TERM
  --ignore-term     the main process notes TERM and goes on (SIGKILL must end it)
  --leave-shm NAME  create /dev/shm/NAME at start, map it, and leave it (a server
                    killed before its resource tracker ran)
  --daemon MODE     the serving process leaves the server's process group by setsid(),
                    as `server &` wrappers and daemon(3) do:
                    wait      a child serves, the main waits for it
                    double    a grandchild serves (double fork), the main sleeps
                    exit      a child serves, the main exits at once (daemon(3))
                    clearenv  as double; the grandchild clears its environment and
                              calls setsid() again
  --ignore-term-all every process of the server ignores TERM (SIGKILL must end it)
llama-server's own flags, for a wrapper script named llama-server (a newcomer's build):
  -m/--model PATH   must be a file (exit 1 otherwise, like a failed model load)
  -c, -np, -ngl, -t taken and ignored
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import mmap
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def word_id(word: str) -> int:
    return zlib.crc32(word.encode()) % 50000 + 10


#: the misses counters whose values this server keeps, by meaning
SHAPE_COUNTERS = {"vllm:prompt_tokens_total": "prompt", "vllm:prompt_tokens_cached_total":
                  "cached", "vllm:generation_tokens_total": "generated",
                  "vllm:prefix_cache_queries_total": "queries",
                  "vllm:prefix_cache_hits_total": "hits",
                  "sglang:prompt_tokens_total": "prompt",
                  "sglang:generation_tokens_total": "generated",
                  "sglang:cached_tokens_total": "cached"}


class Shapes:
    """A recorded server life (tests/ref/shapes/...), played: what each endpoint answered,
    with the counts of this server's own requests in it."""

    def __init__(self, root: Path, *, cache: bool):
        self.root = root
        self.kind = "sglang" if root.parent.name.startswith("sglang") else "vllm"
        self.cache = cache and "caching-off" not in root.name
        self.seen: list[list[int]] = []
        self.counts = dict.fromkeys(("prompt", "cached", "generated", "queries", "hits"), 0)
        chunks = [json.loads(line[6:]) for line in
                  (root / "completion_stream.sse").read_text().splitlines()
                  if line.startswith("data: {")]
        self.chunk = next(c for c in chunks if c.get("choices"))
        self.final = next(c for c in chunks if c.get("usage"))
        self.metrics = (root / "metrics_0_start.txt").read_text()
        self.flush = json.loads((root / "flush.json").read_text())
        self.tokenize = json.loads((root / "tokenize.response.json").read_text())["body"]
        info = json.loads((root / "server_info.json").read_text())
        # SGLang's /get_server_info is recorded as "same as /server_info's"
        self.info = {p: v["body"] if isinstance(v.get("body"), dict) else
                     info["/server_info"]["body"] for p, v in info.items()
                     if v.get("status") == 200}
        self.info["/v1/models"] = json.loads((root / "v1_models.json").read_text())["body"]

    def cached_of(self, ids: list[int]) -> int:
        """Prompt tokens served from the cache: the longest prefix shared with a prompt
        seen since the last flush (whole prompts only: a repeat is all cached)."""
        if not self.cache:
            return 0
        best = 0
        for old in self.seen:
            n = 0
            for a, b in zip(old, ids, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        self.seen.append(ids)
        return best

    def count(self, n_prompt: int, cached: int, generated: int) -> None:
        self.counts["prompt"] += n_prompt
        self.counts["cached"] += cached
        self.counts["generated"] += generated
        if self.cache:
            self.counts["queries"] += n_prompt
            self.counts["hits"] += cached

    def metrics_text(self) -> str:
        out = []
        for line in self.metrics.splitlines():
            m = re.match(r"^([a-z_:]+)\{(.*)\} ([0-9.e+-]+)$", line)
            what = SHAPE_COUNTERS.get(m.group(1)) if m else None
            if m is None or what is None:
                out.append(line)
            elif 'is_streaming="false"' in line:  # SGLang: its warm-up; ours stream
                out.append(line)
                if self.counts[what]:
                    out.append(f'{m.group(1)}{{{m.group(2).replace("false", "true")}}} '
                               f"{float(self.counts[what])}")
            else:
                out.append(f"{m.group(1)}{{{m.group(2)}}} "
                           f"{float(m.group(3)) + self.counts[what]}")
        if self.kind == "sglang" and self.counts["cached"]:
            # labelled by cache_source: SGLang shows it only from the first hit on
            out += ["# HELP sglang:cached_tokens_total Number of cached prompt tokens.",
                    "# TYPE sglang:cached_tokens_total counter",
                    'sglang:cached_tokens_total{cache_source="device",engine_type="unified"} '
                    f"{float(self.counts['cached'])}"]
        return "\n".join(out) + "\n"


class State:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.started = time.monotonic()
        self.served = 0
        self.lock = threading.Lock()
        self.prompt_tokens_total = 0
        self.predicted_total = 0
        self.slots = threading.Semaphore(args.slots)
        self.active = 0  # requests generating now (--knee)
        self.shapes = Shapes(Path(args.shapes), cache=not args.no_cache) \
            if args.shapes else None
        self.flushes = 0

    def ready(self) -> bool:
        if self.args.fault == "never-ready":
            return False
        return time.monotonic() - self.started >= self.args.startup


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each token leaves when it is written
    state: State

    def log_message(self, fmt: str, *a: object) -> None:  # quiet
        pass

    def _json(self, code: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def _text(self, code: int, text: str, ctype: str | None = "text/plain") -> None:
        body = text.encode()
        self.send_response(code)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        st = self.state
        if self.path in st.args.missing:
            self._json(404, {"detail": "Not Found"})
        elif self.path == "/health":
            if st.ready():
                if st.args.health_delay and st.served:
                    print(f"refserver: GET /health, answering in {st.args.health_delay:g} s",
                          flush=True)
                    time.sleep(st.args.health_delay)
                self._json(200, {"status": "ok"})
            else:
                self._json(503, {"error": {"message": "Loading model"}})
        elif st.shapes is not None and self.path == "/metrics":
            with st.lock:
                self._text(200, st.shapes.metrics_text(), "text/plain; version=0.0.4")
        elif st.shapes is not None and self.path in st.shapes.info:
            print(f"refserver: GET {self.path}", flush=True)
            self._json(200, st.shapes.info[self.path])
        elif st.shapes is not None:
            self._json(404, {"detail": "Not Found"})
        elif self.path == "/props" and st.args.fault == "endless-props":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            piece = b"[" * 65536
            with contextlib.suppress(OSError):
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.close_connection = True
        elif self.path == "/props":
            self._json(200, {"build_info": "refserver", "rate": st.args.rate,
                             "model_path": "reference", "total_slots": st.args.slots})
        elif self.path == "/metrics":
            text = (
                "# TYPE llamacpp:prompt_tokens_total counter\n"
                f"llamacpp:prompt_tokens_total {st.prompt_tokens_total}\n"
                "# TYPE llamacpp:tokens_predicted_total counter\n"
                f"llamacpp:tokens_predicted_total {st.predicted_total}\n"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        st = self.state
        body = self._body()
        if self.path in st.args.missing:
            self._json(404, {"detail": "Not Found"})
            return
        if st.shapes is not None and self._shapes_post(st, st.shapes, body):
            return
        if self.path == "/tokenize" and st.args.fault == "bad-tokenize":
            self._json(200, {"tokens": "oops"})
            return
        if self.path == "/tokenize" and st.args.fault == "hang-tokenize":
            time.sleep(3600)
            return
        if self.path == "/tokenize":
            words = str(body.get("content", "")).split()
            ids = [word_id(w) for w in words]
            if body.get("add_special"):
                ids = [1, *ids]
            self._json(200, {"tokens": ids})
            return
        if self.path == "/flush_cache":  # like SGLang's: empties a cache it does not have
            self._json(200, {"flushed": True})
            return
        if self.path != "/v1/completions":
            self._json(404, {"error": "not found"})
            return
        with st.lock:
            st.served += 1
            k = st.served
        with st.slots:  # like llama.cpp's -np: a request waits for a free slot
            with st.lock:
                st.active += 1
            try:
                self._generate(st, body, k)
            finally:
                with st.lock:
                    st.active -= 1

    def _shapes_post(self, st: State, sh: Shapes, body: dict) -> bool:
        """The recorded server's tokenize and flush answers; False for a completion."""
        if self.path == ("/v1/tokenize" if sh.kind == "sglang" else "/tokenize"):
            ids = [word_id(w) for w in str(body.get("prompt", "")).split()]
            self._json(200, {**sh.tokenize, "tokens": ids, "count": len(ids)})
            return True
        if self.path == sh.flush["path"]:
            with st.lock:
                st.flushes += 1
                held = st.args.flush_false < 0 or st.flushes <= st.args.flush_false
                if sh.flush["status"] == 200 and not held:
                    sh.seen.clear()
            if held:
                self._text(200, '{"success":false}', "application/json")
            else:
                self._text(sh.flush["status"], sh.flush["body"], sh.flush["content_type"])
            return True
        if self.path == "/v1/completions":
            return False
        self._json(404, {"detail": "Not Found"})
        return True

    def _generate(self, st: State, body: dict, k: int) -> None:
        a = st.args
        faulty = a.fault and a.fault_every and k % a.fault_every == 0 \
            and (not a.fault_first or k <= a.fault_first)
        if faulty and a.fault == "http500":
            self._json(500, {"error": {"message": "reference fault"}})
            return
        prompt = body.get("prompt")
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        n = int(body.get("n_predict") or body.get("max_tokens") or 16)
        claimed = n
        if faulty and a.fault == "short":
            n = claimed = max(2, n - 3)
        if faulty and a.fault == "overstream":
            n = claimed * 3 // 2
        rate = a.rate * (1 + a.drift) ** (k - 1) if a.rate else 0.0
        gaps = [float(x) / 1e3 for x in a.itl_ms.split(",")] if a.itl_ms else []
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(obj: object) -> None:
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) \
                + b"\n\n"
            pieces = [data[:len(data) // 2], data[len(data) // 2:]] \
                if faulty and a.fault == "torn" else [data]
            for piece in pieces:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                if len(pieces) > 1:
                    time.sleep(0.002)

        if a.burst:  # the whole stream prebuilt and written at once: as fast as we can send
            parts = [b'data: {"choices":[{"text":" w%d","index":0,"finish_reason":null}]}\n\n'
                     % i for i in range(n)]
            parts.append(b"data: " + json.dumps({"choices": [], "usage": {
                "prompt_tokens": n_prompt, "completion_tokens": n}}).encode() + b"\n\n")
            parts.append(b"data: [DONE]\n\n")
            data = b"".join(parts)
            step = 1 << 16
            for i in range(0, len(data), step):
                piece = data[i:i + step]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return
        t0 = time.perf_counter()
        if a.ttft:
            time.sleep(a.ttft)
        t_first = time.perf_counter()
        t_last = t_first
        if faulty and a.fault == "endless":
            with contextlib.suppress(OSError):
                for i in itertools.count():
                    send({"choices": [{"text": f" w{i}", "index": 0, "finish_reason": None}]})
                    if rate:
                        time.sleep(1 / rate)
            self.close_connection = True
            return
        target = t_first
        for i in range(n):
            if a.knee and rate:  # each gap longer while more than --knee requests run
                slow = a.knee_ms / 1e3 if st.active > a.knee else 0.0
                target += 1 / rate + slow if i else 0.0
                delay = target - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            elif gaps or rate:  # an absolute schedule: a late token does not delay the rest
                if gaps:
                    target += gaps[(i - 1) % len(gaps)] if i else 0.0
                else:
                    target = t_first + i / rate
                delay = target - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            if faulty and a.fault == "broken" and i == n // 2:
                self.wfile.write(b"5\r\ndata:\r\n")  # a torn chunk, then the connection drops
                self.wfile.flush()
                self.close_connection = True
                return
            if faulty and a.fault == "hang" and i == n // 2:
                time.sleep(3600)
            if faulty and a.fault == "error-mid-stream" and i == n // 2:
                send({"error": {"code": 500, "message": "reference fault mid-stream",
                                "type": "server_error"}})
                send(b"[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            if faulty and a.fault == "wrong-shape" and i == 2:
                send({"choices": "oops"})
                continue
            t_last = time.perf_counter()
            chunk: dict = {"choices": [{"text": f" w{i}", "index": 0, "finish_reason": None}]}
            if st.shapes is not None:
                chunk = {**st.shapes.chunk, "choices": [{
                    **st.shapes.chunk["choices"][0], "text": f" w{i}",
                    "finish_reason": "length" if i == n - 1 else None}]}
            if a.stamp:
                chunk["t"] = time.monotonic()
            send(chunk)
        with st.lock:
            st.prompt_tokens_total += n_prompt
            st.predicted_total += claimed
        gen_ms = (t_last - t_first) * 1e3
        if faulty and a.fault == "timings-long":
            gen_ms *= 10
        n = claimed
        if st.shapes is not None:
            self._final_shapes(st, st.shapes, prompt, n_prompt, n, t0, t_first, gen_ms, send)
            return
        timings = {"prompt_n": n_prompt, "prompt_ms": (t_first - t0) * 1e3, "cache_n": 0,
                   "predicted_n": n, "predicted_ms": gen_ms,
                   "predicted_per_second": (n - 1) / (gen_ms / 1e3) if gen_ms > 0 else None}
        send({"choices": [{"text": "", "index": 0, "finish_reason": "length"}],
              "timings": timings})
        if faulty and a.fault == "nan-usage":
            send(b'{"choices": [], "usage": {"prompt_tokens": %d, "completion_tokens": NaN}}'
                 % n_prompt)
        else:
            send({"choices": [], "usage": {"prompt_tokens": n_prompt, "completion_tokens": n,
                                           "total_tokens": n_prompt + n}})
        send(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


    def _final_shapes(self, st: State, sh: Shapes, prompt: object, n_prompt: int, n: int,
                      t0: float, t_first: float, gen_ms: float, send: object) -> None:
        ids = prompt if isinstance(prompt, list) else [word_id(w) for w in str(prompt).split()]
        with st.lock:
            cached = sh.cached_of(list(ids))
            sh.count(n_prompt, cached, n)
        usage = {**sh.final["usage"], "prompt_tokens": n_prompt, "completion_tokens": n,
                 "total_tokens": n_prompt + n}
        if "prompt_tokens_details" in usage or st.args.prompt_tokens_details:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        final = {**sh.final, "usage": usage}
        if "metrics" in final:  # vLLM --enable-per-request-metrics
            final["metrics"] = {**final["metrics"], "generation_time_ms": gen_ms,
                                "time_to_first_token_ms": (t_first - t0) * 1e3}
        assert callable(send)
        send(final)
        send(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


_KEEP: list[object] = []


def _stopping(args: argparse.Namespace) -> None:
    """--stop-log, --child, --leave-shm: what abbench's stop is tested on."""
    if args.leave_shm:  # mapped for the server's life, as a psm_ segment is
        shm = Path("/dev/shm", args.leave_shm)
        shm.write_bytes(b"\0" * 4096)
        with open(shm, "r+b") as f:
            _KEEP.append(mmap.mmap(f.fileno(), 4096))
    if not args.stop_log:
        return
    log = Path(args.stop_log)

    def note(line: str) -> None:
        with open(log, "a") as f:
            f.write(f"{line} {time.monotonic():.3f}\n")

    if args.child:  # a child in the server's group: it waits for its own TERM
        subprocess.Popen([sys.executable, "-c", (
            "import signal, sys, time\n"
            "def term(*a):\n"
            f"    open({str(log)!r}, 'a').write(f'child TERM {{time.monotonic():.3f}}\\n')\n"
            "    sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            "while True: time.sleep(0.05)\n")])

    def term(*_: object) -> None:  # shut down for a while, as vLLM and SGLang do
        note("main TERM")
        sys.stdout.write("refserver: stopping")  # a last line without its newline
        sys.stdout.flush()
        if args.ignore_term:
            return
        time.sleep(0.5)
        note("main exit")
        os._exit(0)

    signal.signal(signal.SIGTERM, term)


def _daemon(mode: str) -> None:
    """--daemon MODE (see the module docstring); returns in the process that serves."""
    if not mode:
        return
    child = os.fork()
    if child:  # the main process
        if mode == "exit":
            os._exit(0)
        if mode == "wait":
            os.waitpid(child, 0)
            os._exit(0)
        while True:
            time.sleep(1)
    os.setsid()
    if mode in ("double", "clearenv"):
        if os.fork():
            os._exit(0)
        if mode == "clearenv":  # a session of its own again: only its port names it
            os.setsid()
            i = sys.argv.index("--daemon")
            argv = [*sys.argv[:i], *sys.argv[i + 2:]]
            os.execve(sys.executable, [sys.executable, *argv], {})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--drift", type=float, default=0.0)
    p.add_argument("--ttft", type=float, default=0.0)
    p.add_argument("--startup", type=float, default=0.0)
    p.add_argument("--burst", action="store_true", help="send each stream at once")
    p.add_argument("--fault", default="")
    p.add_argument("--fault-every", type=int, default=1)
    p.add_argument("--fault-first", type=int, default=0)
    p.add_argument("--slots", type=int, default=4, help="requests served at once (-np)")
    p.add_argument("--knee", type=int, default=0, help="while more than this many "
                   "requests run at once, every token gap is --knee-ms longer")
    p.add_argument("--knee-ms", type=float, default=200.0)
    p.add_argument("--itl-ms", default="", help="per-token delays in ms, cycled")
    p.add_argument("--stamp", action="store_true", help="server send time in each chunk")
    p.add_argument("--shapes", default="", help="play a recorded real server life")
    p.add_argument("--no-cache", action="store_true", help="no prefix cache (--shapes)")
    p.add_argument("--flush-false", type=int, default=0)
    p.add_argument("--prompt-tokens-details", action="store_true")
    p.add_argument("--missing", action="append", default=[], help="404 for this path")
    p.add_argument("--health-delay", type=float, default=0.0)
    p.add_argument("--stop-log", default="")
    p.add_argument("--child", action="store_true")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--leave-shm", default="")
    # llama-server's everyday flags, so that a wrapper script named llama-server can
    # stand in for a build in a newcomer's arms file: the model must exist (it is not
    # read); the others are taken and ignored
    p.add_argument("-m", "--model", default="")
    p.add_argument("-c", "--ctx-size", type=int, default=0)
    p.add_argument("-np", "--parallel", type=int, default=0)
    p.add_argument("-ngl", "--n-gpu-layers", default="")
    p.add_argument("-t", "--threads", default="")
    p.add_argument("--daemon", default="", choices=["", "wait", "double", "exit", "clearenv"])
    p.add_argument("--ignore-term-all", action="store_true")
    args = p.parse_args(argv)
    if args.model and not os.path.isfile(args.model):
        print(f"refserver: failed to load model '{args.model}'", flush=True)
        return 1
    if args.ignore_term_all:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _daemon(args.daemon)
    if args.fault == "exit-on-start":
        print("refserver: failing at start-up as asked", flush=True)
        return 3
    Handler.state = State(args)
    _stopping(args)
    ThreadingHTTPServer.request_queue_size = 1024  # hundreds of clients connect at once
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    srv.daemon_threads = True
    print(f"refserver: listening on {args.host}:{args.port} (pid {os.getpid()})", flush=True)
    if args.startup and args.fault != "never-ready":  # a real server logs when it is ready
        def say_ready() -> None:
            left = args.startup - (time.monotonic() - Handler.state.started)
            time.sleep(max(left, 0.0))
            print(f"refserver: ready at {Handler.state.started + args.startup:.6f} "
                  f"(monotonic), said at {time.monotonic():.6f}", flush=True)
        threading.Thread(target=say_ready, daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):
        srv.serve_forever(poll_interval=0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
