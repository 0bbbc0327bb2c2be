"""The real llama-server started the way wrappers start it: in the background of a
shell, in a session of its own (``setsid llama-server ... & wait``). abbench measures
it, stops it, and no process of it is left, after a normal run and after abbench is
killed with SIGKILL (the reaper). Each server carries a unique --alias."""

from __future__ import annotations

import shlex
import uuid
from pathlib import Path

import yaml

from tests.conftest import llama_start
from tests.faultkit import (
    cli,
    cli_start,
    find_run,
    meta,
    only_run,
    samples,
    wait_for,
    wait_gone_matching,
)


def _setsid_arms(path: Path, parts: dict[str, str], tag: str, rounds: int) -> Path:
    """Arm a: llama-server behind ``setsid ... & wait`` (a shell; the server leaves
    abbench's process group); arm b: llama-server started directly."""
    wrapped = shlex.join(llama_start(parts, "-a", f"{tag}-a", ctx=1024))
    wrapped = wrapped.replace("'{host}'", '"$ABBENCH_HOST"').replace("'{port}'",
                                                                    '"$ABBENCH_PORT"')
    doc = {
        "rounds": rounds, "warmup": 1, "seed": 11,
        "defaults": {"preset": "llama.cpp", "ready": {"timeout": 60}, "stop_grace": 5},
        "arms": [
            {"name": "a", "shell": True,
             "start": f"setsid {wrapped} & wait"},
            {"name": "b", "start": llama_start(parts, "-a", f"{tag}-b", ctx=1024)}],
        "workloads": [{"contexts": [256], "decode_tokens": 32}],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_setsid_llama_server_is_measured_and_stopped(tmp_path: Path, results: Path,
                                                       real_parts: dict[str, str]) -> None:
    tag = f"abf-{uuid.uuid4().hex[:10]}"
    arms = _setsid_arms(tmp_path / "arms.yaml", real_parts, tag, rounds=1)
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    run = only_run(results)
    assert all(s["valid"] for s in samples(run))
    assert "stopping processes that left the server's group" in \
        (run / "logs" / "a-r0.log").read_text()
    wait_gone_matching(tag, timeout=5)


def test_sigkill_of_abbench_leaves_no_setsid_llama_server(tmp_path: Path, results: Path,
                                                          real_parts: dict[str, str]) -> None:
    tag = f"abf-{uuid.uuid4().hex[:10]}"
    arms = _setsid_arms(tmp_path / "arms.yaml", real_parts, tag, rounds=3)
    proc = cli_start("run", arms, "--results", results, "--plain", out=tmp_path / "abbench")
    run = wait_for(lambda: find_run(results), 120, "the run folder")
    wait_for(lambda: (run / "logs" / "a-r0.log").exists(), 120, "arm a's server")
    wait_for(lambda: f"{tag}-a" in (run / "logs" / "a-r0.log").read_text()
             or samples(run), 120, "arm a's server to start")
    proc.kill()
    proc.wait()
    wait_gone_matching(tag, timeout=15)  # the reaper, by the life's token
    assert meta(run)["status"] == "running"
