"""Files abbench writes honour the umask; a run is found by the id its run.json
holds (the one the report prints) whatever its folder is called; ``latest`` is the
newest run by its start time."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from abbench.store.run import atomic_write, open_run
from tests.faultkit import cli

ROOT = Path(__file__).resolve().parents[2]
SEED_RUN = ROOT / "docs" / "examples" / "h200-seed-run"


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_honour_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "report.md", "hello\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == mode


def test_a_run_is_found_by_the_id_in_its_run_json(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(SEED_RUN, results / "h200-seed-run")
    assert open_run("20261201-113752-fee7", results).path == results / "h200-seed-run"
    assert open_run("20261201-1137", results).path == results / "h200-seed-run"  # a prefix
    p = cli("report", "20261201-113752-fee7", "--results", results)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("abbench run `20261201-113752-fee7`")


def test_latest_is_the_newest_run_by_start_time(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for name, created in (("a-newer", "2026-12-01T11:00:00+00:00"),
                          ("z-older", "2026-11-30T09:00:00+00:00")):
        (results / name).mkdir(parents=True)
        (results / name / "run.json").write_text(json.dumps({"id": name, "created": created}))
    assert open_run("latest", results).path.name == "a-newer"
