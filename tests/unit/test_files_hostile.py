"""Every file abbench reads or writes, in any shape, gets a clear error (exit 2, no
traceback) and nothing measured is lost: an index that is a directory, a link or held
locked by another process (never deleted under it); a run.json deleted, cut, or not an
object; a full disk with no inode left (run.json still leaves "running"); links in a run
folder (nothing is written through them out of the results folder)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import abbench.store.index as index_mod
from abbench.cli import app
from abbench.errors import StoreError
from abbench.model.records import parse_record
from abbench.store.index import INDEX_FILE, open_index
from abbench.store.run import Run
from tests.conftest import copy_golden_runs

SAMPLE = {"type": "sample", "arm": "a", "round": 0, "workload": "w"}


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    return copy_golden_runs(tmp_path / "results")


def _cli(*args: str | Path) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout + res.stderr


def _first(stored: Path) -> Path:
    return sorted(p for p in stored.iterdir() if p.is_dir())[0]


@pytest.mark.parametrize("shape", ["directory", "link-out", "fifo"])
def test_an_index_path_of_the_wrong_kind_is_refused_clearly(stored: Path, tmp_path: Path,
                                                           shape: str) -> None:
    path = stored / INDEX_FILE
    outside = tmp_path / "elsewhere.sqlite"
    if shape == "directory":
        path.mkdir()
    elif shape == "link-out":
        path.symlink_to(outside)
    else:
        os.mkfifo(path)
    for args in (["ls"], ["history"]):
        code, text = _cli(*args, "--results", stored)
        assert code == 2, text
        assert f"the index {INDEX_FILE} is" in text and "move it away" in text
    assert not outside.exists()  # nothing written through the link


def test_an_index_locked_by_another_process_is_not_deleted_under_it(
        stored: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_index(stored).close()
    path = stored / INDEX_FILE
    inode = path.stat().st_ino
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, sys, time\n"
         f"db = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
         "db.execute('BEGIN EXCLUSIVE')\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()\n"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        monkeypatch.setattr(index_mod, "BUSY_TIMEOUT_S", 0.2)
        idx = open_index(stored)  # read into memory this once
        try:
            assert len(idx.runs()) == 2
        finally:
            idx.close()
        assert path.stat().st_ino == inode  # the same file, not deleted and rebuilt
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    with sqlite3.connect(path) as db:  # and still a whole database
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_deleted_run_json_is_named_as_such(stored: Path) -> None:
    run = _first(stored)
    (run / "run.json").unlink()
    for args in (["report", run.name], ["run", "--resume", run.name],
                 ["report", str(run)]):
        code, text = _cli(*args, "--results", stored)
        assert code == 2, text
        assert "has no run.json (deleted or moved?)" in text, text
        assert "not found" not in text


@pytest.mark.parametrize("damage", ["cut", "garbage", "list", "directory"])
def test_a_damaged_run_json_gets_a_clear_error_with_a_hint(stored: Path, damage: str) -> None:
    run = _first(stored)
    path = run / "run.json"
    text = path.read_text()
    if damage == "cut":
        path.write_text(text[: len(text) // 2])
        want = "run.json is cut short (line"
    elif damage == "garbage":
        path.write_text("}" + text)
        want = "run.json is not valid JSON"
    elif damage == "list":
        path.write_text("[1, 2]\n")
        want = "run.json holds a JSON list, not an object"
    else:
        path.unlink()
        path.mkdir()
        want = "run.json is a directory"
    code, out = _cli("report", run.name, "--results", stored)
    assert code == 2, out
    assert want in out
    if damage == "cut":
        assert "restore it from a backup; samples.jsonl" in out


def test_no_inode_left_still_moves_run_json_off_running(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run.create(tmp_path / "results", {"arms": [], "status": "running"}, {})
    run.append(parse_record(SAMPLE))

    def no_inode(*a: object, **k: object) -> tuple[int, str]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", no_inode)
    for status in ("interrupted", "failed", "complete"):
        run.update_meta(status=status, error="x" * 100)  # the rest cannot be written
        m = json.loads((run.path / "run.json").read_text())
        assert m["status"] == status and m["arms"] == []


def test_nothing_is_written_through_a_link_out_of_the_run_folder(tmp_path: Path) -> None:
    run = Run.create(tmp_path / "results", {"arms": []}, {})
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("keep me\n")
    run.samples_path.unlink()
    run.samples_path.symlink_to(victim)
    with pytest.raises(StoreError, match=r"samples\.jsonl in the run folder is a link"):
        run.append(parse_record(SAMPLE))
    assert victim.read_text() == "keep me\n"
    shutil.rmtree(run.logs_dir)
    run.logs_dir.symlink_to(outside)
    with pytest.raises(StoreError, match="logs in the run folder is a link"):
        run.log_path("a", 0)
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
