"""scripts/synthetic_gguf.py against the real parts: the `tiny` shape with SmolLM2's
tokenizer is byte-identical for one seed and differs for another, and the real
llama-server loads it, decodes exactly 16 tokens with finite log-probabilities, and
serves SmolLM2's chat template."""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "synthetic_gguf.py"


def _generate(out: Path, seed: int, tokenizer: str) -> str:
    r = subprocess.run([sys.executable, str(SCRIPT), "--shape", "tiny", "--quant", "q4_0",
                        "--seed", str(seed), "--out", str(out), "--tokenizer-from", tokenizer,
                        "--jobs", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "bytes" in r.stdout and " s with 1 job" in r.stdout, r.stdout
    return hashlib.sha256(out.read_bytes()).hexdigest()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chat_template(gguf_path: str) -> str:
    import gguf

    return gguf.GGUFReader(gguf_path).fields["tokenizer.chat_template"].contents()


def test_tiny_synthetic_model_is_seeded_and_served(tmp_path: Path, real_parts):
    model = tmp_path / "tiny-a.gguf"
    sha_a = _generate(model, 0, real_parts["model"])
    sha_b = _generate(tmp_path / "tiny-b.gguf", 0, real_parts["model"])
    sha_c = _generate(tmp_path / "tiny-c.gguf", 1, real_parts["model"])
    assert sha_a == sha_b
    assert sha_c != sha_a

    port = _free_port()
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen([real_parts["server"], "-m", str(model), "-t", "1", "-c", "512",
                             "--host", "127.0.0.1", "--port", str(port), "-np", "1",
                             "--no-warmup"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "llama-server not ready in 120 s"
            try:
                if requests.get(base + "/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.1)

        body = {"prompt": "The capital of France is", "max_tokens": 16, "n_predict": 16,
                "ignore_eos": True, "temperature": 0, "stream": True, "logprobs": 1,
                "stream_options": {"include_usage": True}}
        chunks = []
        with requests.post(base + "/v1/completions", json=body, stream=True,
                           timeout=60) as resp:
            assert resp.status_code == 200, resp.text
            for line in resp.iter_lines():
                if not line.startswith(b"data: "):
                    continue
                data = line[len(b"data: "):]
                if data == b"[DONE]":
                    break
                chunks.append(json.loads(data))
        final = [c for c in chunks if c.get("usage")]
        assert final, chunks[-3:]
        assert final[-1]["usage"]["completion_tokens"] == 16
        if "timings" in final[-1]:
            assert final[-1]["timings"]["predicted_n"] == 16
        # Random weights, but finite activations: every sampled token has a finite
        # log-probability (NaN logits would show here).
        logprobs = [lp for c in chunks for ch in c.get("choices", [])
                    for lp in ((ch.get("logprobs") or {}).get("content") or [])]
        assert len(logprobs) == 16, chunks[:2]
        assert all(math.isfinite(lp["logprob"]) for lp in logprobs), logprobs

        # The server read the tiny shape: 2 x 64 wide, SmolLM2's vocabulary, the plan's
        # parameters (llama.cpp counts every tensor element).
        (meta,) = [m["meta"] for m in requests.get(base + "/v1/models", timeout=10).json()["data"]]
        assert (meta["n_vocab"], meta["n_embd"], meta["n_ctx_train"]) == (49152, 64, 2048)
        assert meta["n_params"] == 6_414_656 and meta["ftype"] == "Q4_0"

        props = requests.get(base + "/props", timeout=10).json()
        assert props["chat_template"] == _chat_template(real_parts["model"])
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        except ProcessLookupError:
            pass
        log.close()
