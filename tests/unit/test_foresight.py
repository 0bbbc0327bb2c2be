"""The preset read from the start command, and the server's context read from its
flags (what validate compares the workloads with)."""

from __future__ import annotations

import pytest

from abbench.config.foresight import server_context
from abbench.config.infer import did_you_mean, infer_preset


@pytest.mark.parametrize(("start", "preset"), [
    (["./build/bin/llama-server", "-m", "m.gguf"], "llama.cpp"),
    (["taskset", "-c", "0-7", "{server}", "-m", "m.gguf"], "llama.cpp"),
    ("/opt/v/bin/vllm serve /models/x --port {port}", "vllm"),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "x"], "vllm"),
    (["python3", "-m", "sglang.launch_server", "--model-path", "x"], "sglang"),
    (["sglang", "serve", "--model-path", "x"], "sglang"),
    (["./run-my-server.sh", "--port", "{port}"], None),
    (["vllm", "bench"], None),
])
def test_preset_from_the_start_command(start: list[str] | str, preset: str | None) -> None:
    assert infer_preset(start, {"server": "/x/build/bin/llama-server"}) == preset


@pytest.mark.parametrize(("preset", "words", "limit"), [
    ("llama.cpp", ["-c", "8192"], 8192),
    ("llama.cpp", ["--ctx-size=8192", "-np", "4"], 2048),  # per slot
    ("llama.cpp", ["-c", "8192", "-np", "4", "--kv-unified"], 8192),
    ("llama.cpp", ["-c", "0"], None),  # the model's own length
    ("llama.cpp", ["-m", "m.gguf"], None),
    ("vllm", ["serve", "x", "--max-model-len", "32768"], 32768),
    ("sglang", ["--context-length", "4096"], 4096),
    ("custom", ["-c", "4096"], None),
])
def test_the_servers_context_from_its_flags(preset: str, words: list[str],
                                            limit: int | None) -> None:
    got = server_context(preset, words)
    assert (got[0] if got else None) == limit


def test_did_you_mean() -> None:
    fields = ["start", "stop_grace", "contexts", "rounds"]
    assert did_you_mean("command", fields) == "start"
    assert did_you_mean("stop_grase", fields) == "stop_grace"
    assert did_you_mean("context", fields) == "contexts"
    assert did_you_mean("colour", fields) is None
