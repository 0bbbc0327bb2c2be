"""Start a real vLLM or SGLang server once and record its response shapes.

Usage:
  python capture_shapes.py --kind vllm|sglang --out DIR [--stop group-term|main-term|main-int]
                           [--port N] [--tag NAME] -- SERVER ARGV...

Standard library only (run it with any Python 3.11). The server is started in its
own process group with its output in DIR/server.log; /health is polled every
50 ms from the start (DIR/health.json: when the port opened, every status
change, the ready time); then the requests below are sent and every answer is
kept as the server sent it (raw SSE bytes for streams); then the server is
stopped the way --stop says and /dev/shm is compared with its state before the
start (DIR/shm.json). Used to make tests/ref/shapes/ (see its README.md).

Files (written only for the endpoints the kind has):
  health.json                 readiness timeline and the latency of /health calls when ready
  v1_models.json              GET /v1/models
  tokenize.request.json/.response.json
  metrics_0_start.txt         /metrics before any request
  completion_stream.request.json, completion_stream.sse, completion_stream.timing.json
  metrics_1_after_first.txt   after the first streamed completion
  completion_repeat.sse       the same request again (prefix cache)
  metrics_2_after_repeat.txt
  flush.json                  POST /reset_prefix_cache (vLLM) or /flush_cache (SGLang)
  completion_after_flush.sse, metrics_3_after_flush.txt
  completion_nostream.json    the same prompt, stream false (system_fingerprint)
  server_info.json            vLLM: GET /server_info; SGLang: /server_info, /get_server_info
  shm.json                    the stop, and what /dev/shm held before, while and after
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

PROMPT = ("The quick brown fox jumps over the lazy dog. " * 40).strip()
SHORT = "Hello, world! How are you today?"
DECODE = 64


def now() -> float:
    return time.monotonic()


def request(port: int, method: str, path: str, body: object | None = None,
            timeout: float = 120.0) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    out = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), out


def stream(port: int, path: str, body: object) -> tuple[int, bytes, list[tuple[float, int]]]:
    """POST and read the SSE answer raw; returns (status, bytes, [(t, len) per read])."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    raw = b""
    reads: list[tuple[float, int]] = []
    t0 = now()
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        raw += chunk
        reads.append((now() - t0, len(chunk)))
    conn.close()
    return r.status, raw, reads


def sse_events(raw: bytes) -> list[str]:
    return [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]


def timing(raw: bytes, reads: list[tuple[float, int]]) -> dict[str, object]:
    """decode tok/s from the arrival times of the content events."""
    # each event gets the time of the read that completed it
    parts = raw.split(b"\n\n")
    events: list[tuple[float, str]] = []
    got = 0
    for t, n in reads:
        got += n
        done = raw[:got].count(b"\n\n")
        events.extend((t, parts[i].decode()) for i in range(len(events), done))
    content_t = []
    usage = None
    for t, ev in events:
        if not ev.startswith("data: ") or ev == "data: [DONE]":
            continue
        obj = json.loads(ev[6:])
        if obj.get("choices") and obj["choices"][0].get("text"):
            content_t.append(t)
        if obj.get("usage"):
            usage = obj["usage"]
    out: dict[str, object] = {"events": len(events), "content_events": len(content_t),
                              "usage": usage}
    if usage and len(content_t) >= 2 and content_t[-1] > content_t[0]:
        n = usage["completion_tokens"]
        out["ttft_s"] = round(content_t[0], 4)
        out["decode_tok_s"] = round((n - 1) / (content_t[-1] - content_t[0]), 2)
    return out


def shm() -> dict[str, int]:
    """Everything in /dev/shm: psm_* (multiprocessing.shared_memory), sem.* (its
    semaphores) and what a server names itself (SGLang's sglang_loads_*.shm)."""
    out = {}
    for name in sorted(os.listdir("/dev/shm")):
        with contextlib.suppress(FileNotFoundError):
            out[name] = os.stat(os.path.join("/dev/shm", name)).st_size
    return out


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def group_members(pgid: int) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode()[:80]
                    out.append(f"{pid} {cmd}")
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    return out


def save(out: str, name: str, data: bytes | str | object) -> None:
    path = os.path.join(out, name)
    if isinstance(data, (bytes, bytearray)):
        mode, payload = "wb", bytes(data)
    elif isinstance(data, str):
        mode, payload = "w", data
    else:
        mode, payload = "w", json.dumps(data, indent=2, sort_keys=False) + "\n"
    with open(path, mode) as f:
        f.write(payload)  # type: ignore[arg-type]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=["vllm", "sglang"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop", default="group-term",
                    choices=["group-term", "main-term", "main-int", "abbench", "group-kill"],
                    help="group-term/main-term/main-int: that signal, then wait until the "
                         "whole group is gone (SIGKILL after --grace); abbench: as "
                         "abbench/server/process.py Server.stop does: SIGTERM to the group, "
                         "wait for the main process (10 s), then SIGKILL to what is left of the "
                         "group; "
                         "group-kill: SIGKILL to the group at once (a crash, abbench's reaper "
                         "after its grace)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("--grace", type=float, default=60,
                    help="seconds to wait for the group to exit before SIGKILL")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    port = a.port or free_port()
    argv = [x.replace("{port}", str(port)) for x in argv]
    os.makedirs(a.out, exist_ok=True)
    vllm = a.kind == "vllm"
    tok_path = "/tokenize" if vllm else "/v1/tokenize"
    flush = ("POST", "/reset_prefix_cache") if vllm else ("POST", "/flush_cache")

    shm_before = shm()
    log = open(os.path.join(a.out, "server.log"), "wb")  # noqa: SIM115 (the server's life)
    t_start = now()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    print(f"capture: started pid {proc.pid} on port {port}: {' '.join(argv)}", file=sys.stderr)
    timeline: list[dict[str, object]] = []
    last = None
    ready_s = None
    while now() - t_start < a.ready_timeout:
        if proc.poll() is not None:
            print("capture: server exited before ready; see server.log", file=sys.stderr)
            return 1
        try:
            st, _, body = request(port, "GET", "/health", timeout=30)
            state: object = st
        except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
            state = "refused"
        except TimeoutError:
            state = "timeout"
        if state != last:
            timeline.append({"t_s": round(now() - t_start, 2), "health": state})
            last = state
        if state == 200:
            ready_s = now() - t_start
            break
        time.sleep(0.05)
    if ready_s is None:
        print("capture: not ready in time", file=sys.stderr)
        os.killpg(proc.pid, signal.SIGKILL)
        return 1
    print(f"capture: ready in {ready_s:.1f} s", file=sys.stderr)
    lat = []
    for _ in range(5):
        t = now()
        st, _, body = request(port, "GET", "/health")
        lat.append({"status": st, "ms": round((now() - t) * 1000, 1), "body": body.decode()})
    health = {"ready_s": round(ready_s, 2), "timeline": timeline, "ready_calls": lat,
              "poll_interval_s": 0.05}

    try:
        st, hdr, body = request(port, "GET", "/v1/models")
        save(a.out, "v1_models.json", {"status": st, "body": json.loads(body)})
        model = json.loads(body)["data"][0]["id"]

        treq = {"prompt": SHORT} if vllm else {"prompt": SHORT, "model": model}
        st, hdr, body = request(port, "POST", tok_path, treq)
        save(a.out, "tokenize.request.json", {"method": "POST", "path": tok_path, "body": treq})
        save(a.out, "tokenize.response.json", {"status": st, "body": json.loads(body)})

        def metrics(name: str) -> None:
            st, _, body = request(port, "GET", "/metrics")
            save(a.out, name, body)
            print(f"capture: {name}: {st}, {len(body)} bytes", file=sys.stderr)

        metrics("metrics_0_start.txt")
        creq = {"model": model, "prompt": PROMPT, "max_tokens": DECODE, "min_tokens": DECODE,
                "ignore_eos": True, "temperature": 0, "top_p": 1, "stream": True,
                "stream_options": {"include_usage": True}}
        save(a.out, "completion_stream.request.json",
             {"method": "POST", "path": "/v1/completions", "body": creq})
        st, raw, reads = stream(port, "/v1/completions", creq)
        save(a.out, "completion_stream.sse", raw)
        t1 = timing(raw, reads)
        t1["status"] = st
        metrics("metrics_1_after_first.txt")
        st, raw, reads = stream(port, "/v1/completions", creq)
        save(a.out, "completion_repeat.sse", raw)
        t2 = timing(raw, reads)
        metrics("metrics_2_after_repeat.txt")
        st, hdr, body = request(port, *flush)
        save(a.out, "flush.json", {"method": flush[0], "path": flush[1], "status": st,
                                   "content_type": hdr.get("content-type"),
                                   "body": body.decode()})
        st, raw, reads = stream(port, "/v1/completions", creq)
        save(a.out, "completion_after_flush.sse", raw)
        t3 = timing(raw, reads)
        metrics("metrics_3_after_flush.txt")
        save(a.out, "completion_stream.timing.json",
             {"first": t1, "repeat": t2, "after_flush": t3})
        nreq = dict(creq, stream=False)
        nreq.pop("stream_options")
        st, hdr, body = request(port, "POST", "/v1/completions", nreq)
        save(a.out, "completion_nostream.json", {"status": st, "body": json.loads(body)})
        info = {}
        for path in (["/server_info"] if vllm else ["/server_info", "/get_server_info"]):
            st, hdr, body = request(port, "GET", path)
            try:
                parsed: object = json.loads(body)
            except ValueError:
                parsed = body.decode()[:2000]
            if vllm and st == 200 and isinstance(parsed, dict):
                parsed = {"keys": sorted(parsed)}  # vLLM's holds the whole environment
            info[path] = {"status": st, "body": parsed}
        save(a.out, "server_info.json", info)
        print(f"capture: decode tok/s {t1.get('decode_tok_s')} / {t2.get('decode_tok_s')} / "
              f"{t3.get('decode_tok_s')}", file=sys.stderr)
    finally:
        save(a.out, "health.json", health)
        # resident memory of the group while alive
        rss = 0
        for line in group_members(proc.pid):
            pid = line.split()[0]
            try:
                with open(f"/proc/{pid}/status") as f:
                    for s in f:
                        if s.startswith("VmRSS:"):
                            rss += int(s.split()[1])
            except FileNotFoundError:
                pass
        members = group_members(proc.pid)
        shm_running = shm()
        t_stop = now()
        left_at_main_exit: list[str] = []
        if a.stop == "abbench":
            os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            main_exit = now() - t_stop
            left_at_main_exit = group_members(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        elif a.stop == "group-kill":
            os.killpg(proc.pid, signal.SIGKILL)
        elif a.stop == "group-term":
            os.killpg(proc.pid, signal.SIGTERM)
        elif a.stop == "main-term":
            proc.send_signal(signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGINT)
        killed = False
        main_s = None
        while proc.poll() is None or group_alive(proc.pid):  # poll first: reap the main
            if main_s is None and proc.returncode is not None:
                main_s = now() - t_stop
                left_at_main_exit = group_members(proc.pid)
            if now() - t_stop > a.grace:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                time.sleep(1)
                break
            time.sleep(0.05)
        proc.wait()
        stop_s = now() - t_stop
        if a.stop == "abbench":
            main_s = main_exit
        if main_s is None:
            main_s = stop_s
        time.sleep(1)
        after = shm()
        new = {k: v for k, v in after.items() if k not in shm_before}
        save(a.out, "shm.json", {
            "stop": a.stop, "main_exit_s": round(main_s, 2), "group_empty_s": round(stop_s, 2),
            "sigkill_needed": killed, "group_left_at_main_exit": left_at_main_exit,
            "exit_code": proc.returncode, "group_rss_mib": round(rss / 1024),
            "group_members_before_stop": members,
            "shm_new_while_running": {k: v for k, v in shm_running.items() if k not in shm_before},
            "shm_left_after_stop": new})
        print(f"capture: stopped ({a.stop}) in {stop_s:.1f} s, exit {proc.returncode}, "
              f"sigkill {killed}; RSS {rss / 1024:.0f} MiB; /dev/shm left: "
              f"{ {k: f'{v / 2**20:.0f} MiB' for k, v in new.items()} }", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
