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
  --burst           prebuild each stream and send it at once (client-capacity bench)
  --slots N         completions served at once, the rest wait (llama.cpp's -np); 4
  --itl-ms A,B,...  per-token delays in ms, cycled (token i waits the i-th of them
                    after token i-1; instead of --rate): known ITL percentiles
  --stamp           each content chunk carries "t": the server's monotonic clock when
                    it was written (the client-capacity bench's timestamp error)
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def word_id(word: str) -> int:
    return zlib.crc32(word.encode()) % 50000 + 10


class State:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.started = time.monotonic()
        self.served = 0
        self.lock = threading.Lock()
        self.prompt_tokens_total = 0
        self.predicted_total = 0
        self.slots = threading.Semaphore(args.slots)

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

    def do_GET(self) -> None:
        st = self.state
        if self.path == "/health":
            if st.ready():
                self._json(200, {"status": "ok"})
            else:
                self._json(503, {"error": {"message": "Loading model"}})
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
        if self.path == "/tokenize" and st.args.fault == "bad-tokenize":
            self._json(200, {"tokens": "oops"})
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
            self._generate(st, body, k)

    def _generate(self, st: State, body: dict, k: int) -> None:
        a = st.args
        faulty = a.fault and a.fault_every and k % a.fault_every == 0
        if faulty and a.fault == "http500":
            self._json(500, {"error": {"message": "reference fault"}})
            return
        prompt = body.get("prompt")
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        n = int(body.get("n_predict") or body.get("max_tokens") or 16)
        if faulty and a.fault == "short":
            n = max(2, n - 3)
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
            if gaps or rate:  # an absolute schedule: a late token does not delay the rest
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
            if a.stamp:
                chunk["t"] = time.monotonic()
            send(chunk)
        with st.lock:
            st.prompt_tokens_total += n_prompt
            st.predicted_total += n
        gen_ms = (t_last - t_first) * 1e3
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
    p.add_argument("--slots", type=int, default=4, help="requests served at once (-np)")
    p.add_argument("--itl-ms", default="", help="per-token delays in ms, cycled")
    p.add_argument("--stamp", action="store_true", help="server send time in each chunk")
    args = p.parse_args(argv)
    if args.fault == "exit-on-start":
        print("refserver: failing at start-up as asked", flush=True)
        return 3
    Handler.state = State(args)
    ThreadingHTTPServer.request_queue_size = 1024  # hundreds of clients connect at once
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    srv.daemon_threads = True
    print(f"refserver: listening on {args.host}:{args.port} (pid {os.getpid()})", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        srv.serve_forever(poll_interval=0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
