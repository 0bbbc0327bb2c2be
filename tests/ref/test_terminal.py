"""Signals and terminals, handled at one boundary (abbench.cli.main): a reader that
closes the pipe (exit 0 or 141, never 1: a CI reading ``history --check`` must not see
a regression), a terminal that closes (SIGHUP, then EIO on every write), a terminal
whose encoding cannot show a character, Ctrl-C while Python imports, SIGTERM while the
report is written. None of them ends in a traceback or an "internal error"."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, copy_golden_runs
from tests.faultkit import (
    find_run,
    meta,
    own_refserver,
    ref_arms,
    samples,
    wait_for,
    wait_gone,
)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_golden_runs(tmp_path_factory.mktemp("results"))


def _run(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """``abbench ARGS`` with its output kept as bytes (in the terminal's encoding)."""
    return subprocess.run([sys.executable, "-m", "abbench", *map(str, args)],
                          capture_output=True, timeout=120, env={**os.environ, **env})


def _closed_stdout(*args: str | Path, env: dict[str, str] | None = None
                   ) -> subprocess.CompletedProcess[bytes]:
    """``abbench ARGS`` whose stdout is a pipe nobody reads (``| true``, ``| head -c 0``)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "abbench", *map(str, args)], stdout=w,
                              stderr=subprocess.PIPE, timeout=120,
                              env={**os.environ, **(env or {})})
    finally:
        os.close(w)


@pytest.mark.parametrize("args", [["ls"], ["history", "--check"], ["report", "latest"],
                                  ["report", "latest", "--format", "csv"], ["--help"]],
                         ids=["ls", "history-check", "report", "csv", "help"])
def test_a_closed_stdout_exits_141_quietly(stored: Path, args: list[str]) -> None:
    extra = [] if args == ["--help"] else ["--results", str(stored)]
    p = _closed_stdout(*args, *extra)
    err = p.stderr.decode()
    assert p.returncode in (0, 141), (p.returncode, err)
    assert "Traceback" not in err and "Exception ignored" not in err and "Error" not in err


@pytest.mark.parametrize(("encoding", "args"), [("latin-1", ["report", "latest"]),
                                              ("ascii", ["report", "h200-aa-32k"])])
def test_a_terminal_that_cannot_show_a_character_gets_a_replacement(
        stored: Path, encoding: str, args: list[str]) -> None:
    p = _run(*args, "--results", stored, env={"PYTHONIOENCODING": encoding, "LC_ALL": "C"})
    assert p.returncode in (0, 1), p.stderr
    assert b"Traceback" not in p.stderr and b"UnicodeEncodeError" not in p.stderr
    assert b"?" in p.stdout  # what it could not show, replaced


def _sigint_as_a_terminal_sends_it() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_while_python_imports_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """A sitecustomize sends SIGINT the moment abbench's command layer is imported."""
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.abc, os, signal, sys\n"
        "class Hit(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'abbench.campaign.commands':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hit())\n"
        "open('site.txt', 'w').write(repr((signal.getsignal(signal.SIGINT),\n"
        "    signal.pthread_sigmask(signal.SIG_BLOCK, []))))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    # Ctrl-C as a terminal delivers it: SIGINT at its default, not blocked, whatever this
    # test's own process inherited (a test run of 2026-12-03 saw the SIGINT go unheeded
    # and `ls` run to its end: exit 2, "no results folder")
    p = subprocess.run([sys.executable, "-m", "abbench", "ls"], capture_output=True,
                       text=True, env=env, timeout=60, cwd=tmp_path,
                       preexec_fn=_sigint_as_a_terminal_sends_it)
    site = (tmp_path / "site.txt").read_text() if (tmp_path / "site.txt").exists() else None
    assert p.returncode == 130, (p.stderr, "SIGINT handler, blocked:", site)
    assert "Traceback" not in p.stderr and "KeyboardInterrupt" not in p.stderr


def test_a_closed_terminal_interrupts_the_run_cleanly(tmp_path: Path, results: Path) -> None:
    """SIGHUP, then EIO on every write to the terminal: interrupted (130), run.json and
    report.md written, no internal error."""
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": ["--rate", "20"], "b": ["--rate", "20"]},
                    rounds=3)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "abbench", "run", str(arms), "--results",
                             str(results), "--plain"], stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    try:
        run = wait_for(lambda: find_run(results), 60, "the run folder")
        wait_for(lambda: samples(run), 60, "a sample")
        os.close(master)  # the terminal is gone: every write now fails with EIO
        master = -1
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=60) == 130
    finally:
        if master >= 0:
            os.close(master)
        proc.kill()
        proc.wait()
    m = meta(run)
    assert m["status"] == "interrupted", m
    assert "internal error" not in str(m.get("error"))
    assert (run / "report.md").is_file()
    assert not (run / "error.log").exists()
    wait_gone()


def test_sigterm_while_the_report_is_written_keeps_the_report(tmp_path: Path,
                                                              results: Path) -> None:
    """A sitecustomize says when the report starts and holds it until the test has sent
    SIGTERM (a file says so): the signal comes while the report is written, however
    slow the machine."""
    mark, sent = tmp_path / "writing-report", tmp_path / "term-sent"
    (tmp_path / "sitecustomize.py").write_text(
        "import os, time\n"
        "import abbench.campaign.runner as r\n"
        "_orig = r.Campaign.write_report\n"
        "def slow(self, meta):\n"
        f"    open({str(mark)!r}, 'w').close()\n"
        f"    while not os.path.exists({str(sent)!r}):\n"
        "        time.sleep(0.01)\n"
        "    return _orig(self, meta)\n"
        "r.Campaign.write_report = slow\n")
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": []}, rounds=1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.Popen([sys.executable, "-m", "abbench", "run", str(arms), "--results",
                             str(results), "--plain"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    wait_for(mark.exists, 60, "the report to start")
    proc.send_signal(signal.SIGTERM)
    sent.touch()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    run = find_run(results)
    assert run is not None
    assert meta(run)["status"] == "complete"
    assert (run / "report.md").is_file() and (run / "report.json").is_file()
    wait_gone()
    del out


def test_validate_and_run_print_nothing_raw_to_a_latin1_terminal(tmp_path: Path,
                                                                 results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": []}, rounds=1)
    arms.write_text(arms.read_text().replace("name: a\n", "name: a\n  label: \"a → β ✓\"\n", 1))
    p = _run("run", arms, "--results", results, "--plain", env={"PYTHONIOENCODING": "latin-1"})
    assert p.returncode == 0, p.stderr
    assert b"Traceback" not in p.stderr
    assert b"a ? \xdf ?" in p.stdout or b"a ? ? ?" in p.stdout, p.stdout
    wait_gone()
