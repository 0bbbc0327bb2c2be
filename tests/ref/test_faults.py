"""Faults the reference server causes (tests/refserver.py --fault) and faults of
abbench itself (signals, results directory): exit code, message, samples kept,
no server left. The same faults in the real llama-server: tests/real/test_faults.py."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from abbench.report.text import md_escape
from tests.faultkit import (
    cli,
    cli_start,
    find_run,
    lines,
    meta,
    only_run,
    own_refserver,
    ref_arms,
    samples,
    send,
    slots,
    wait_for,
    wait_gone,
)

ROOT = os.geteuid() == 0


@pytest.fixture
def ref(tmp_path: Path) -> Path:
    return own_refserver(tmp_path)


def _failed_slots(run: Path) -> list[dict]:
    return [s for s in slots(run) if s["status"] == "failed"]


# ------------------------------------------------------------- server start-up


def test_server_exits_during_startup(tmp_path: Path, ref: Path, results: Path) -> None:
    arms = ref_arms(tmp_path / "a.yaml", ref, {"good": [], "bad": ["--fault", "exit-on-start"]})
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 1, p.stderr
    assert "FAILED arm bad, round 0: arm bad, round 0: the server exited with code 3 before it " \
           "was ready" in p.stderr
    assert "refserver: failing at start-up as asked" in p.stderr  # the log tail is shown
    run = only_run(results)
    failed = _failed_slots(run)
    assert {(s["arm"], s["round"]) for s in failed} == {("bad", 0), ("bad", 1)}
    assert all(s["exit_code"] == 3 and "failing at start-up" in s["log_tail"] for s in failed)
    # the run went on: the good arm measured every round
    assert {(s["arm"], s["round"]) for s in slots(run) if s["status"] == "ok"} == \
        {("good", 0), ("good", 1)}
    assert len([s for s in samples(run) if s["valid"]]) == 4
    report = (run / "report.md").read_text()
    assert "Round 0 is left out of the comparison" in report
    assert "the server exited with code 3" in report
    wait_gone()


def test_server_never_ready_times_out(tmp_path: Path, ref: Path, results: Path) -> None:
    arms = ref_arms(tmp_path / "a.yaml", ref, {"good": [], "stuck": ["--fault", "never-ready"]},
                    rounds=1)
    doc = arms.read_text().replace("timeout: 20", "timeout: 1.5")
    arms.write_text(doc)
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 1, p.stderr
    assert "the server was not ready after 1.5 s (GET /health never answered 200)" in p.stderr
    assert "raise ready.timeout" in p.stderr
    run = only_run(results)
    assert [(s["arm"], s["status"]) for s in slots(run) if s["arm"] == "stuck"] == \
        [("stuck", "failed")]
    # the stuck server was stopped (it answered 503 all along and never exited)
    assert [s["exit_code"] for s in slots(run) if s["arm"] == "stuck"] != [None]
    wait_gone()


# ------------------------------------------------------------ bad responses


@pytest.mark.parametrize(("fault", "status", "reason"), [
    ("http500", "failed", 'HTTP 500: {"error": {"message": "reference fault"}}'),
    ("broken", "failed", "connection failed: ChunkedEncodingError"),
    ("short", "invalid", "completion_tokens 13 != 16"),
    ("wrong-shape", "failed", "stream chunk 3: choices is a string ('oops')"),
    ("nan-usage", "failed", "stream chunk 18: usage.completion_tokens is NaN"),
    ("error-mid-stream", "failed", 'stream chunk 9: the server reported an error: '
                                   '{"code": 500, "message": "reference fault mid-stream"'),
    ("endless", "failed", "stream chunk 49: the stream went on past 48 content chunks"),
    ("torn", "ok", None),
])
def test_bad_response_marks_the_sample_and_goes_on(tmp_path: Path, ref: Path, results: Path,
                                                   fault: str, status: str,
                                                   reason: str | None) -> None:
    # every 2nd completion is faulty: the warm-up is fine, then decode 64 is faulty,
    # decode 128 is fine, in every server life
    arms = ref_arms(tmp_path / "a.yaml", ref,
                    {"good": [], "bad": ["--fault", fault, "--fault-every", "2"]})
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr  # a bad sample is no failed server life
    run = only_run(results)
    assert meta(run)["status"] == "complete"
    assert all(s["status"] == "ok" for s in slots(run))
    bad = [s for s in samples(run) if s["arm"] == "bad"]
    assert [(s["workload"], s["status"], s["valid"]) for s in bad] == \
        [("decode 64", status, status == "ok"), ("decode 128", "ok", True)] * 2
    assert all(s["valid"] for s in samples(run) if s["arm"] == "good")
    report = (run / "report.md").read_text()
    assert "| decode 128 (tok/s) |" in report  # the good rows are compared
    if reason is None:  # torn chunks are still a valid stream: measured like any other
        assert "| decode 64 (tok/s) |" in report and "Sample " not in report
    else:
        assert all(reason in s["reason"] for s in bad if not s["valid"]), bad
        for r in (0, 1):  # the report names each bad sample, and why
            line = next(ln for ln in report.splitlines()
                        if ln.startswith(f"Sample {status}: arm bad, round {r}, decode 64 rep 0:"))
            assert md_escape(reason) in line, line
    wait_gone()


def test_answers_that_never_end_or_have_the_wrong_shape_outside_the_stream(
        tmp_path: Path, ref: Path, results: Path) -> None:
    """/props sends a body that never ends (cut at the transport's 16 MiB cap: props are
    only informational, the run goes on without them); /tokenize answers the wrong
    shape (every sample of that arm fails, saying so; the server life itself is fine)."""
    arms = ref_arms(tmp_path / "a.yaml", ref, {"good": [], "props": ["--fault", "endless-props"],
                                               "tok": ["--fault", "bad-tokenize"]}, rounds=1)
    p = cli("run", arms, "--results", results, "--plain", timeout=120)
    assert p.returncode == 0, p.stderr
    run = only_run(results)
    m = meta(run)
    assert m["status"] == "complete"
    assert set(m["servers"]) == {"good", "tok"}  # the endless /props left no entry
    assert all(s["valid"] for s in samples(run) if s["arm"] in ("good", "props"))
    tok = [s for s in samples(run) if s["arm"] == "tok"]
    assert len(tok) == 2 and all(s["status"] == "failed" for s in tok)
    why = "tokenize failed at /tokenize: the answer: tokens is a string ('oops')"
    assert all(s["reason"] == why for s in tok), tok
    report = (run / "report.md").read_text()
    assert f"Sample failed: arm tok, round 0, decode 64 rep 0: {why}." in report
    wait_gone()


def test_hung_request_times_out(tmp_path: Path, ref: Path, results: Path) -> None:
    # the reference server stops sending mid-stream but still answers /health:
    # the request fails after request_timeout, the sample says so, the run goes on
    arms = ref_arms(tmp_path / "a.yaml", ref,
                    {"good": [], "hangs": ["--fault", "hang", "--fault-every", "2"]},
                    rounds=1, defaults={"request_timeout": 1.5})
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    run = only_run(results)
    hung = [s for s in samples(run) if s["arm"] == "hangs" and not s["valid"]]
    assert len(hung) == 1 and "timed out" in hung[0]["reason"].lower(), hung
    wait_gone()


# ------------------------------------------------------------ signals to abbench


def _start_and_wait_for_samples(tmp_path: Path, ref: Path, results: Path, n: int = 3
                                ) -> tuple[subprocess.Popen[bytes], Path]:
    arms = ref_arms(tmp_path / "a.yaml", ref, {"a": ["--rate", "60"], "b": ["--rate", "60"]},
                    rounds=4)
    proc = cli_start("run", arms, "--results", results, "--plain", out=tmp_path / "abbench")
    run = wait_for(lambda: find_run(results), 60, "the run folder")
    wait_for(lambda: len(samples(run)) >= n, 60, f"{n} samples")
    return proc, run


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_stops_servers_keeps_samples(tmp_path: Path, ref: Path, results: Path,
                                            sig: signal.Signals) -> None:
    proc, run = _start_and_wait_for_samples(tmp_path, ref, results)
    before = lines(run)
    code = send(proc, sig)
    err = (tmp_path / "abbench.err").read_text()
    assert code == 130, err
    assert f"Error: stopped by {sig.name}; every sample measured so far is kept in" in err
    assert f"hint: resume with: abbench run --resume {run.name} --results {results}" in err
    after = lines(run)
    assert after[:len(before)] == before  # nothing written before was changed or lost
    assert meta(run)["status"] == "interrupted"
    assert (run / "report.md").is_file()
    wait_gone(timeout=5)


def test_sigkill_of_abbench_leaves_no_server_and_resumes(tmp_path: Path, ref: Path,
                                                         results: Path) -> None:
    proc, run = _start_and_wait_for_samples(tmp_path, ref, results)
    wait_for(lambda: not _no_ref(ref), 30, "a running server")
    proc.kill()
    proc.wait()
    wait_gone(timeout=10)  # PR_SET_PDEATHSIG and the reaper
    kept = samples(run)
    assert meta(run)["status"] == "running"  # abbench had no chance to say more
    p = cli("run", "--resume", run.name, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    m = meta(run)
    assert m["status"] == "complete" and m["rounds_done"] == 4
    ok = [(s["arm"], s["round"]) for s in slots(run) if s["status"] == "ok"]
    assert sorted(ok) == sorted((a, r) for a in "ab" for r in range(4))
    kept_keys = [(s["slot"], s["workload"]) for s in kept]
    assert [(s["slot"], s["workload"]) for s in samples(run)][:len(kept)] == kept_keys
    wait_gone()


def _no_ref(ref: Path) -> bool:
    from tests.conftest import no_process_left, started_pids
    return no_process_left(started_pids(servers=True))


# ------------------------------------------------------------ results directory


def test_results_under_a_file_fails_before_any_server(tmp_path: Path, ref: Path) -> None:
    (tmp_path / "afile").write_text("x")
    arms = ref_arms(tmp_path / "a.yaml", ref, {"a": [], "b": []})
    p = cli("run", arms, "--results", tmp_path / "afile" / "results", "--plain")
    assert p.returncode == 2, p.stderr
    assert "cannot create the results directory" in p.stderr
    assert "hint: pass --results DIR with a writable directory" in p.stderr
    assert "ready in" not in p.stderr
    wait_gone(timeout=1)


@pytest.mark.skipif(ROOT, reason="root writes through permission bits (the tmpfs tests cover it)")
def test_results_not_writable_fails_before_any_server(tmp_path: Path, ref: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    arms = ref_arms(tmp_path / "a.yaml", ref, {"a": [], "b": []})
    p = cli("run", arms, "--results", ro, "--plain")
    assert p.returncode == 2, p.stderr
    assert "not writable" in p.stderr
    wait_gone(timeout=1)


@pytest.fixture
def tmpfs(tmp_path: Path):
    """Mount a small tmpfs (root only); yields a function that mounts with options."""
    if not ROOT:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(size: str, *opts: str) -> Path:
        d = tmp_path / f"mnt{len(mounted)}"
        d.mkdir()
        o = ",".join([f"size={size}", *opts])
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", o, "tmpfs", str(d)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
        mounted.append(d)
        return d

    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.mark.parametrize(("mount", "message", "hint"), [
    (("4m", "ro"), "the results directory is not writable",
     "hint: fix its permissions or pass --results DIR"),
    (("1m",), "only 1024 KiB free on the results disk",
     "hint: free some space or pass --results DIR on another disk"),
], ids=["read-only", "full"])
def test_unusable_results_disk_fails_before_any_server(tmp_path: Path, ref: Path, tmpfs,
                                                        mount, message, hint) -> None:
    d = tmpfs(*mount)
    arms = ref_arms(tmp_path / "a.yaml", ref, {"a": [], "b": []})
    p = cli("run", arms, "--results", d, "--plain")
    assert p.returncode == 2, p.stderr
    assert f"Error: {d}: {message}" in p.stderr
    assert hint in p.stderr
    wait_gone(timeout=1)


def test_disk_fills_mid_run_keeps_samples_and_resumes(tmp_path: Path, ref: Path,
                                                      tmpfs) -> None:
    results = tmpfs("12m")
    proc, run = _start_and_wait_for_samples(tmp_path, ref, results, n=2)
    # fill the disk: the next append finds no space
    subprocess.run(["dd", "if=/dev/zero", f"of={results}/filler", "bs=1M", "count=20"],
                   capture_output=True, check=False)
    code = proc.wait(timeout=60)
    err = (tmp_path / "abbench.err").read_text()
    assert code == 1, err
    assert "the run stopped: cannot" in err and "No space left on device" in err
    assert "every sample written before is kept" in err
    assert f"abbench run --resume {run.name} --results {results}" in err
    kept = lines(run)  # strict: no half line was left
    assert len([r for r in kept if r["type"] == "sample"]) >= 2
    wait_gone(timeout=5)
    # free the space, resume: the run completes on top of what was kept
    (results / "filler").unlink()
    p = cli("run", "--resume", run.name, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    assert lines(run)[:len(kept)] == kept
    assert meta(run)["status"] == "complete" and meta(run)["rounds_done"] == 4
    wait_gone()


def test_sigkill_of_abbench_reaps_grandchildren(tmp_path: Path, ref: Path,
                                                results: Path) -> None:
    """PR_SET_PDEATHSIG only reaches the direct child: here a shell that starts the
    server as its child (no exec). The reaper process kills the whole group."""
    import sys

    import yaml

    arms = ref_arms(tmp_path / "a.yaml", ref, {"a": ["--rate", "60"], "b": ["--rate", "60"]},
                    rounds=4)
    doc = yaml.safe_load(arms.read_text())
    for arm in doc["arms"]:
        arm["shell"] = True
        arm["start"] = (f"'{sys.executable}' '{ref}' --port \"$ABBENCH_PORT\" --rate 60; "
                        "echo server ended")
    arms.write_text(yaml.safe_dump(doc))
    proc = cli_start("run", arms, "--results", results, "--plain", out=tmp_path / "abbench")
    run = wait_for(lambda: find_run(results), 60, "the run folder")
    wait_for(lambda: len(samples(run)) >= 2, 60, "2 samples")
    proc.kill()
    proc.wait()
    wait_gone(timeout=10)


class _CtrlCAtTheEnd:
    """A progress display during whose last call (after every server stopped) a
    Ctrl-C arrives."""

    def start(self, total_slots: int) -> None: ...
    def slot(self, index: int, arm: str, round_: int, what: str) -> None: ...
    def log(self, message: str) -> None:
        self.said = [*getattr(self, "said", []), message]

    def finish(self) -> None:
        if not getattr(self, "fired", False):
            self.fired = True
            from abbench.errors import Interrupted
            raise Interrupted("stopped by SIGINT")


@pytest.mark.parametrize("until_ci", [None, 0.5])
def test_interrupt_after_the_last_server_keeps_the_run_complete(
        tmp_path: Path, ref: Path, results: Path, until_ci: float | None) -> None:
    from abbench.campaign.runner import Campaign, RunOptions
    from abbench.config.loader import load_config

    stats = {"stats": {"until_ci": until_ci, "max_rounds": 2}} if until_ci else {}
    arms = ref_arms(tmp_path / "a.yaml", ref, {"a": [], "b": []}, **stats)
    progress = _CtrlCAtTheEnd()
    camp = Campaign(load_config(arms), RunOptions(results=results), progress=progress)
    # every server life ended (and --until-ci had stopped at its cap): nothing to resume
    out = camp.execute()
    assert out.status == "complete" and meta(out.run.path)["status"] == "complete"
    assert any("interrupted after the last server stopped" in m for m in progress.said)
    wait_gone(timeout=5)


@contextlib.contextmanager
def _stray(tmp_path: Path, ref: Path, *, age: float = 0.0,
           env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A reference server of no run's (another file, so the run's checks for its own
    server never match it) listening on a free port, at least ``age`` seconds old; killed
    on leaving."""
    import socket
    import sys

    import requests

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stray_path = tmp_path / "stray" / "refserver_stray.py"
    stray_path.parent.mkdir(exist_ok=True)
    stray_path.write_bytes(ref.read_bytes())
    stray = subprocess.Popen([sys.executable, str(stray_path), "--port", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, **(env or {})})
    try:
        def up() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{port}/health", timeout=1).ok
            except requests.RequestException:
                return False

        wait_for(up, 30, "the stray server")
        time.sleep(age)  # (its psutil start time may read up to a second early)
        yield stray, port
    finally:
        stray.kill()
        stray.wait()


def test_a_stray_server_on_the_port_is_never_measured(tmp_path: Path, ref: Path, results: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that took the automatic port before the arm's server could bind it
    answers /health: abbench must notice it is not its own server and measure nothing;
    the port chosen again is the same one each time here, so every start fails."""
    from abbench.campaign.runner import Campaign, RunOptions
    from abbench.config.loader import load_config
    from abbench.server import process as arms_mod

    # the check calls a listener a stray when it started over 0.5 s before our server
    # (a start-time tolerance): make the stray that old, whatever the machine's speed
    with _stray(tmp_path, ref, age=1.0) as (stray, port):
        monkeypatch.setattr(arms_mod, "free_port", lambda host: port)  # the race, forced
        arms = ref_arms(tmp_path / "a.yaml", ref, {"a": [], "b": []}, rounds=1)
        out = Campaign(load_config(arms), RunOptions(results=results)).execute()
    failed = [s for s in slots(out.run.path) if s["status"] == "failed"]
    assert len(failed) == 2 and out.status == "complete" and out.failed_slots == 2
    assert all(f"port {port} answered, but from pid {stray.pid}" in s["reason"] for s in failed)
    assert all(f"3 starts, on ports {port}, {port}, {port}" in s["reason"] for s in failed)
    assert not samples(out.run.path)  # nothing measured from the stray
    wait_gone(timeout=5)


class _Said:
    def start(self, total_slots: int) -> None: ...
    def slot(self, index: int, arm: str, round_: int, what: str) -> None: ...
    def finish(self) -> None: ...

    def log(self, message: str) -> None:
        self.said = [*getattr(self, "said", []), message]


@pytest.mark.parametrize("stray_kind", ["older", "another life"])
def test_a_taken_auto_port_is_chosen_again(tmp_path: Path, ref: Path, results: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           stray_kind: str) -> None:
    """Issue 28's failed vLLM run: another process took the port abbench chose before
    the arm's server bound it. With port: auto the life starts again on a port chosen
    again, says so in the log, and measures; nothing comes from the stray. 'another
    life': the stray is another run's server (it carries another life's token) and is
    younger than ours, as the concurrent run's was: its age does not excuse it."""
    from abbench.campaign.runner import Campaign, RunOptions
    from abbench.config.loader import load_config
    from abbench.server import ports, process
    from abbench.server.tree import LIFE_VAR

    older = stray_kind == "older"
    with _stray(tmp_path, ref, age=1.0 if older else 0.0,
                env=None if older else {LIFE_VAR: "another-run"}) as (stray, port):
        chosen = itertools.cycle([port, None])  # each life's first start loses the race
        monkeypatch.setattr(process, "free_port",
                            lambda host: next(chosen) or ports.free_port(host))
        if not older:  # ours started before the stray bound the port: 'since' is later
            real = process.foreign_listener
            monkeypatch.setattr(process, "foreign_listener", lambda p, since, *a, **k:
                                real(p, since - 3600, *a, **k))
        arms = ref_arms(tmp_path / "a.yaml", ref, {"a": [], "b": []}, rounds=1)
        said = _Said()
        out = Campaign(load_config(arms), RunOptions(results=results), progress=said).execute()
        assert stray.poll() is None  # not ours: left running
    assert out.status == "complete" and out.failed_slots == 0
    assert {(s["arm"], s["status"]) for s in slots(out.run.path)} == {("a", "ok"), ("b", "ok")}
    retries = [m for m in said.said if f"port {port} was taken before the server bound it" in m]
    assert len(retries) == 2 and all("start 2 of 3" in m for m in retries), said.said
    assert all(f"answered, but from pid {stray.pid}" in m for m in retries), said.said
    assert {s["arm"] for s in samples(out.run.path)} == {"a", "b"}
    logs = list(out.run.path.rglob("*.log"))
    assert any(f"# abbench: port {port} was taken" in p.read_text() for p in logs)
    wait_gone(timeout=5)


def test_abbench_killed_right_after_the_fork_leaves_no_grandchild(tmp_path: Path, ref: Path
                                                                  ) -> None:
    """The narrowest window: abbench dies as soon as the server process exists, before
    any of its own bookkeeping. The server (a shell) has already started a grandchild
    that PR_SET_PDEATHSIG does not reach; the reaper must still know the group."""
    import sys
    import textwrap

    import yaml

    arms = ref_arms(tmp_path / "a.yaml", ref, {"a": [], "b": []})
    doc = yaml.safe_load(arms.read_text())
    doc["arms"][0]["shell"] = True
    doc["arms"][0]["start"] = (f"'{sys.executable}' '{ref}' --port \"$ABBENCH_PORT\"; "
                               "echo server ended")
    arms.write_text(yaml.safe_dump(doc))
    script = tmp_path / "die_after_fork.py"
    script.write_text(textwrap.dedent(f"""
        import os, subprocess, sys, time
        from pathlib import Path
        from abbench.server import process as arms
        from abbench.config.loader import load_config
        from abbench.config.arms import placeholder_values, resolve_arms

        class DieAfterFork(subprocess.Popen):
            def __init__(self, args, *a, **k):
                super().__init__(args, *a, **k)
                if "abbench.server.reaper" not in args:  # the server: let it start its child, die
                    log = Path({str(tmp_path / 's.log')!r})
                    deadline = time.time() + 30
                    while b"listening" not in log.read_bytes() and time.time() < deadline:
                        time.sleep(0.05)
                    os._exit(9)

        arms.subprocess.Popen = DieAfterFork
        cfg = load_config(Path({str(arms)!r}))
        arm = resolve_arms(cfg)[0]
        arms.start_server(arm, round_=0, log_path=Path({str(tmp_path / 's.log')!r}),
                          argv_for_port=lambda port: arm.command(
                              placeholder_values(cfg, arm, port=port, round_=0)))
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=60, cwd=str(Path(__file__).resolve().parents[2]))
    try:
        assert p.returncode == 9, p.stderr
        assert "refserver: listening" in (tmp_path / "s.log").read_text()  # the grandchild ran
        wait_gone(timeout=10)
    finally:  # a failed test must not leak the server either
        subprocess.run(["pkill", "-9", "-f", str(ref)], check=False)


# ------------------------------------------------------------ abbench's own faults


class _Boom:
    """A slot task that raises an exception nobody foresaw, in one arm's lives."""

    name = "boom"
    cold = False

    def __init__(self, arm: str):
        self.arm = arm

    def run(self, ctx) -> None:  # type: ignore[no-untyped-def]
        if ctx.arm.name == self.arm:
            raise ValueError("boom")


def test_an_unexpected_exception_fails_that_server_life_never_ok(
        tmp_path: Path, ref: Path, results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from abbench.campaign import commands, preflight

    real = preflight.default_tasks
    monkeypatch.setattr(preflight, "default_tasks", lambda cfg: [*real(cfg), _Boom("b")])
    arms = ref_arms(tmp_path / "a.yaml", ref, {"a": [], "b": []})
    out = commands.run(arms, rounds=None, seed=None, results=results, live=False,
                       until_ci=None, max_rounds=None, resume=None)
    run = only_run(results)
    assert out.code == 1
    assert ("2 server life(s) failed (the report says why); to run their rounds again: "
            f"abbench run --resume {run.name} --results {results}") in out.stderr, out.stderr
    assert meta(run)["status"] == "complete"
    failed = _failed_slots(run)
    assert [(s["arm"], s["reason"]) for s in failed] == \
        [("b", f"internal error: ValueError: boom (traceback in b-r{r}.log)") for r in (0, 1)]
    assert "ValueError: boom" in (run / "logs" / "b-r0.log").read_text()  # the traceback
    assert "arm b failed: internal error: ValueError: boom" in (run / "report.md").read_text()
    wait_gone()


def test_an_unexpected_exception_between_slots_stops_the_run_failed_not_running(
        tmp_path: Path, ref: Path, results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from abbench.campaign import commands, runner
    from abbench.errors import AbbenchError

    def planned_then_boom(cfg, run, schedule, seed, progress):  # type: ignore[no-untyped-def]
        yield from schedule[:2]
        raise RuntimeError("boom between slots")

    (tmp_path / "wd").mkdir()
    arms = ref_arms(tmp_path / "a.yaml", ref, {"a": [], "b": []}, defaults={"cwd": "wd"})
    with monkeypatch.context() as m:
        m.setattr(runner, "planned_and_more", planned_then_boom)
        with pytest.raises(AbbenchError) as e:
            commands.run(arms, rounds=None, seed=None, results=results, live=False,
                         until_ci=None, max_rounds=None, resume=None)
    run = only_run(results)
    assert e.value.exit_code == 1
    assert e.value.message == ("the run stopped: internal error: RuntimeError: boom between "
                               f"slots; every sample written before is kept in "
                               f"{run / 'samples.jsonl'}")
    assert e.value.hint == (f"please report it with {run / 'error.log'}; then resume with: "
                            f"abbench run --resume {run.name} --results {results}")
    m_ = meta(run)
    assert m_["status"] == "failed" and m_["error"].startswith("internal error: RuntimeError")
    assert "RuntimeError: boom between slots" in (run / "error.log").read_text()
    assert "| decode 64 (tok/s) |" in (run / "report.md").read_text()  # round 0 measured
    # a resume whose checks fail (the arms' cwd is gone) leaves the run as it was
    (tmp_path / "wd").rmdir()
    p = cli("run", "--resume", run.name, "--results", results, "--plain")
    assert p.returncode == 2 and "is not a directory" in p.stderr, p.stderr
    assert meta(run)["status"] == "failed"
    (tmp_path / "wd").mkdir()
    p = cli("run", "--resume", run.name, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    assert meta(run)["status"] == "complete" and meta(run)["rounds_done"] == 2
    wait_gone()
