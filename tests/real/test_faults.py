"""Faults caused in the real llama-server (kill -9, SIGSTOP, a taken port, a bad
model) and signals to abbench while real servers run. Each test checks the exit
code, the message, that samples written before are intact, and that no
llama-server of the test is left (its processes carry a unique --alias)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import llama_start, no_process_left, started_pids
from tests.faultkit import (
    cli,
    cli_start,
    find_run,
    lines,
    meta,
    only_run,
    samples,
    send,
    slots,
    wait_for,
    wait_gone,
)


@pytest.fixture
def tag() -> str:
    return f"abf-{uuid.uuid4().hex[:10]}"


def real_arms(path: Path, parts: dict[str, str], tag: str, *, rounds: int = 2,
              arm_extra: dict[str, dict[str, Any]] | None = None, **defaults: Any) -> Path:
    """Two llama-server arms (a, b); each server's --alias is ``TAG-ARM``."""
    arm_extra = arm_extra or {}
    doc = {
        "rounds": rounds, "warmup": 1, "seed": 11,
        "defaults": {"preset": "llama.cpp", "ready": {"timeout": 60}, "stop_grace": 5,
                     **defaults},
        "arms": [{"name": n, "start": llama_start(parts, "-a", f"{tag}-{n}", ctx=1024),
                  **arm_extra.get(n, {})} for n in ("a", "b")],
        "workloads": [{"contexts": [256], "decode_tokens": 64}],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _mid_stream(results: Path, arm: str, proc: subprocess.Popen[bytes]) -> Path:
    """Wait until ``arm``'s server is decoding a measured request (after warm-up);
    return the run folder. Fails at once, with the logs, if abbench ends first."""
    def decoding() -> Path | None:
        run = find_run(results)
        if proc.poll() is not None:
            logs = "" if run is None else "\n".join(
                f"== {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                for p in sorted((run / "logs").glob("*.log")))
            raise AssertionError(f"abbench ended (code {proc.returncode}) before arm {arm} "
                                 f"was seen decoding\n{logs}")
        if run is None:
            return None
        for log in (run / "logs").glob(f"{arm}-r*.log"):
            text = log.read_text(errors="replace")
            launched, released = text.count("launch_slot_"), text.count("stop processing")
            if launched >= 2 and released < launched:
                return run
        return None
    return wait_for(decoding, 120, f"arm {arm} decoding")


def _server_pids(tag_arm: str) -> list[int]:
    import psutil
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and tag_arm in (p.info["cmdline"] or []):
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def test_kill9_of_a_server_mid_run(tmp_path: Path, real_parts: dict[str, str], tag: str,
                                   results: Path) -> None:
    """The acceptance test of the spine: kill -9 of a server mid-run -> that arm/round
    is reported failed, the run goes on, earlier samples are kept, no server is left;
    resume then runs the failed round again."""
    arms = real_arms(tmp_path / "arms.yaml", real_parts, tag)
    proc = cli_start("run", arms, "--results", results, "--plain", out=tmp_path / "ab")
    run = _mid_stream(results, "b", proc)
    before = lines(run)
    [pid] = _server_pids(f"{tag}-b")
    victim_round = next(int(p.stem.split("-r")[1]) for p in (run / "logs").glob("b-r*.log"))
    os.kill(pid, signal.SIGKILL)
    code = proc.wait(timeout=240)
    err = (tmp_path / "ab.err").read_text()
    assert code == 1, err
    assert f"FAILED arm b, round {victim_round}: the server died (exit code -9)" in err
    assert lines(run)[:len(before)] == before
    failed = [s for s in slots(run) if s["status"] == "failed"]
    assert [(s["arm"], s["round"], s["exit_code"]) for s in failed] == [("b", victim_round, -9)]
    ok = {(s["arm"], s["round"]) for s in slots(run) if s["status"] == "ok"}
    assert ok >= {("a", 1 - victim_round), ("b", 1 - victim_round)}  # the run went on
    report = (run / "report.md").read_text()
    assert f"Failed: arm b, round {victim_round}: the server died (exit code -9)" in report
    assert f"Round {victim_round} is left out of the comparison" in report
    wait_gone()
    # resume: the failed round runs again at the end, in the same order
    p = cli("run", "--resume", run.name, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    m = meta(run)
    assert m["reruns"] == {str(victim_round): 2} and m["status"] == "complete"
    orders = {r: [a for rr, _, a in m["schedule"] if rr == r] for r in (victim_round, 2)}
    assert orders[victim_round] == orders[2]
    assert "It was run again as round 2" in (run / "report.md").read_text()
    assert m["rounds_done"] == 2
    wait_gone()


def test_sigstop_hang_times_out_and_stops_the_server(tmp_path: Path,
                                                     real_parts: dict[str, str], tag: str,
                                                     results: Path) -> None:
    arms = real_arms(tmp_path / "arms.yaml", real_parts, tag, rounds=1, request_timeout=3)
    proc = cli_start("run", arms, "--results", results, "--plain", out=tmp_path / "ab")
    run = _mid_stream(results, "b", proc)
    before = lines(run)
    [pid] = _server_pids(f"{tag}-b")
    os.kill(pid, signal.SIGSTOP)
    code = proc.wait(timeout=240)
    err = (tmp_path / "ab.err").read_text()
    assert code == 1, err
    assert "FAILED arm b, round 0: the server hangs: no answer to GET /health in 5 s" in err
    assert lines(run)[:len(before)] == before
    [hung] = [s for s in samples(run) if s["arm"] == "b" and not s["valid"]]
    assert "timed out" in hung["reason"].lower()
    assert [s["status"] for s in slots(run) if s["arm"] == "b"] == ["failed"]
    wait_gone()  # the stopped server got SIGCONT + SIGTERM and is gone


def test_port_taken_by_another_process(tmp_path: Path, real_parts: dict[str, str], tag: str,
                                       results: Path) -> None:
    with socket.socket() as squatter, socket.socket() as probe:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
        probe.close()
        # a: a fixed free port over two rounds (no false alarm from the last round's
        # TIME_WAIT); b: the port someone else holds
        arms = real_arms(tmp_path / "arms.yaml", real_parts, tag,
                         arm_extra={"a": {"port": free}, "b": {"port": taken}})
        p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 1, p.stderr
    assert f"port {taken} on 127.0.0.1 is already in use by another process" in p.stderr
    assert "hint: stop that process, or set port: auto" in p.stderr
    run = only_run(results)
    st = {(s["arm"], s["round"]): s["status"] for s in slots(run)}
    assert st == {("a", 0): "ok", ("a", 1): "ok", ("b", 0): "failed", ("b", 1): "failed"}
    assert not list((run / "logs").glob("b-r*.log"))  # no b server was ever started
    wait_gone()


def test_server_exits_during_startup(tmp_path: Path, real_parts: dict[str, str], tag: str,
                                     results: Path) -> None:
    # a model file that is there (validate foresees a missing one) but is no GGUF: the
    # server exits while loading it
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"this is not a GGUF file\n" * 64)
    bad = {**real_parts, "model": str(broken)}
    arms = real_arms(tmp_path / "arms.yaml", real_parts, tag, rounds=1)
    doc = yaml.safe_load(arms.read_text())
    doc["arms"][1]["start"] = llama_start(bad, "-a", f"{tag}-b", ctx=1024)
    arms.write_text(yaml.safe_dump(doc))
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 1, p.stderr
    assert "FAILED arm b, round 0: arm b, round 0: the server exited with code 1 before it was " \
           "ready" in p.stderr
    assert "last lines of the server log" in p.stderr and "broken.gguf" in p.stderr
    run = only_run(results)
    assert {s["arm"]: s["status"] for s in slots(run)} == {"a": "ok", "b": "failed"}
    wait_gone()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_abbench_stopped_mid_stream_then_resumed(tmp_path: Path, real_parts: dict[str, str],
                                                 tag: str, results: Path,
                                                 sig: signal.Signals) -> None:
    arms = real_arms(tmp_path / "arms.yaml", real_parts, tag)
    proc = cli_start("run", arms, "--results", results, "--plain", out=tmp_path / "ab")
    run = _mid_stream(results, "a", proc)
    before = lines(run)
    code = send(proc, sig)
    err = (tmp_path / "ab.err").read_text()
    if sig == signal.SIGINT:
        assert code == 130, err
        assert "Error: stopped by SIGINT; every sample measured so far is kept" in err
        assert f"hint: resume with: abbench run --resume {run.name} --results {results}" in err
        assert meta(run)["status"] == "interrupted"
        wait_gone(timeout=8)  # stopped by abbench itself, within stop_grace
    else:
        assert code == -9
        wait_gone(timeout=8)  # PR_SET_PDEATHSIG / the reaper
    assert lines(run)[:len(before)] == before
    assert no_process_left(started_pids(servers=True))
    p = cli("run", "--resume", run.name, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    m = meta(run)
    assert m["status"] == "complete" and m["rounds_done"] == 2
    assert lines(run)[:len(before)] == before
    assert "decode 256 (tok/s)" in p.stdout
    wait_gone()


def test_no_sample_fails_without_a_fault(tmp_path: Path, real_parts: dict[str, str],
                                         tag: str, results: Path) -> None:
    """The control for the tests above: without a fault every sample is valid.

    It caught a real bug: llama-server closes the kept-alive connection after a
    streamed completion, and the next request (the tokenize of the first measured
    prompt, right after the warm-up) got that dead connection from the pool
    ("Remote end closed connection"), failing a sample in most runs.
    """
    arms = real_arms(tmp_path / "arms.yaml", real_parts, tag, rounds=3)
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    run = only_run(results)
    bad = [(s["arm"], s["round"], s["reason"]) for s in samples(run) if not s["valid"]]
    assert bad == []
    assert len(samples(run)) == 6
    wait_gone()
