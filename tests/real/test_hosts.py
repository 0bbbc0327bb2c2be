"""Campaigns over many hosts, end to end: the real llama-server, the real single-node
Slurm cluster of scripts/slurm-local.sh (the same host twice, named by shard).

- ``abbench run ARMS --slurm --shards 2 --rounds 2``: both shards run as array tasks
  of one job, the gathered report has both hosts' rounds;
- ``scancel`` of one task mid-run: the other's rounds stay in the report, the
  cancelled shard's are failed, and ``abbench run --resume CAMPAIGN`` finishes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from abbench.campaign import slurm
from abbench.campaign.shards import host_name
from tests.conftest import llama_start, no_process_left, started_pids, write_arms
from tests.faultkit import cli_start
from tests.real.test_slurm import cluster  # noqa: F401  (the fixture)

pytestmark = pytest.mark.usefixtures("cluster")


def small_arms(tmp_path: Path, parts: dict[str, str], tag: str) -> Path:
    """arms/llama-cpu.yaml, smaller: KV f16 against q8_0, one short context."""
    f16 = llama_start(parts, "--alias", tag, ctx=512)
    q8 = llama_start(parts, "--alias", tag, "--cache-type-k", "q8_0", "--cache-type-v", "q8_0",
                     "-fa", "on", ctx=512)
    return write_arms(tmp_path / "arms.yaml", f"""
rounds: 4
warmup: 1
defaults:
  preset: llama.cpp
  ready: {{timeout: 120}}
  stop_grace: 10
arms:
  - name: f16
    label: "KV f16"
    start: {json.dumps(f16)}
  - name: q8
    label: "KV q8_0"
    start: {json.dumps(q8)}
workloads:
  - contexts: [128]
    decode_tokens: 16
""")


def abbench(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "abbench", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def campaign_of(results: Path) -> Path:
    (folder,) = [p for p in results.iterdir() if (p / "campaign.json").is_file()]
    return folder


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def test_two_shards_as_slurm_array_tasks(tmp_path: Path, results: Path, real_parts) -> None:
    tag = f"abbench-hosts-{tmp_path.name}"
    arms = small_arms(tmp_path, real_parts, tag)
    t0 = time.monotonic()
    p = abbench("run", arms, "--slurm", "--shards", "2", "--rounds", "2", "--results", results,
                "--plain")
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    folder = campaign_of(results)
    camp = json.loads((folder / "campaign.json").read_text())
    (sub,) = camp["submissions"]  # one job array, one task per shard
    assert sub["tasks"] == {"0": 0, "1": 1}
    for task in (0, 1):
        files = slurm.task_files(folder / "slurm", sub["job"], task)
        assert files.status.read_text() == "exit 0\n"
        assert f"shard {task}: ran in" in files.err.read_text()
    host = host_name()
    shards = sorted(p.name for p in (folder / "shards").iterdir())
    assert shards == [f"0-{host}", f"1-{host}"]
    for name in shards:
        meta = json.loads((folder / "shards" / name / "run.json").read_text())
        fp = meta["host_fingerprint"]
        assert fp["hostname"] and fp["cpu"] and "gpus" in fp and "cuda" in fp
        assert meta["status"] == "complete" and meta["rounds"] == 1
    # the gathered run: two hosts' rounds, paired within a host
    out = p.stdout
    assert f"`0-{host}` 1 round" in out and f"`1-{host}` 1 round" in out
    assert "| | KV f16 | KV q8_0 |" in out and "| decode 128 (tok/s) |" in out
    assert "shards: 2 done; rounds done 2/2" in p.stderr
    samples = [r for r in records(folder) if r["type"] == "sample"]
    assert {(r["host"], r["round"]) for r in samples} == {(f"0-{host}", 0), (f"1-{host}", 1)}
    meta = json.loads((folder / "run.json").read_text())
    assert meta["status"] == "complete" and meta["rounds_done"] == 2
    # and it reads like any run
    rep = abbench("report", folder.name, "--results", results)
    assert rep.returncode == 0 and f"`1-{host}` 1 round" in rep.stdout
    ls = abbench("ls", "--results", results)
    assert folder.name in ls.stdout and "2/2" in ls.stdout
    import abbench as ab

    df = ab.load_samples(results)
    assert set(df["host"]) == {f"0-{host}", f"1-{host}"}
    assert no_process_left(started_pids(servers=True))
    print(f"\ne2e --slurm --shards 2 --rounds 2: {wall:.1f} s")


def test_a_cancelled_task_keeps_the_others_rounds_and_resume_finishes(
        tmp_path: Path, results: Path, real_parts) -> None:
    tag = f"abbench-hosts-{tmp_path.name}"
    arms = small_arms(tmp_path, real_parts, tag)
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = cli_start("run", arms, "--slurm", "--shards", "2", "--rounds", "2", "--results",
                     results, "--plain", out=out)
    deadline = time.monotonic() + 300
    shard1: Path | None = None
    while True:  # shard 1 mid-run: its first server life finished, the second not yet
        assert time.monotonic() < deadline, Path(f"{out}.err").read_text()
        found = sorted(results.glob("*/shards/1-*/samples.jsonl"))
        if found and '"type": "slot", "status": "ok"' in found[0].read_text():
            shard1 = found[0].parent
            break
        time.sleep(0.1)
    folder = shard1.parent.parent
    job = json.loads((folder / "campaign.json").read_text())["submissions"][0]["job"]
    subprocess.run(["scancel", f"{job}_1"], check=True)
    assert proc.wait(timeout=300) == 1
    err, report = Path(f"{out}.err").read_text(), Path(f"{out}.out").read_text()
    t_cancel = time.monotonic() - t0
    assert "shard 1: 0 of 1 rounds" in err and "--resume" in err
    host = host_name()
    assert f"`0-{host}` 1 round" in report  # the other shard's round is in the report
    assert "| decode 128 (tok/s) |" in report
    # the details (what did not run, and why) are in the gathered run's report.md
    assert "not run: shard 1's task ended CANCELLED" in (folder / "report.md").read_text()
    meta = json.loads((folder / "run.json").read_text())
    assert meta["status"] == "interrupted" and meta["rounds_done"] == 1
    shard_meta = json.loads((shard1 / "run.json").read_text())
    assert shard_meta["status"] == "interrupted"
    assert no_process_left(started_pids(servers=True))

    t1 = time.monotonic()
    p = abbench("run", "--resume", folder, "--plain")
    t_resume = time.monotonic() - t1
    assert p.returncode == 0, p.stderr
    assert "shard(s) 1 submitted again" in p.stderr
    assert f"`0-{host}` 1 round" in p.stdout and f"`1-{host}` 1 round" in p.stdout
    meta = json.loads((folder / "run.json").read_text())
    assert meta["status"] == "complete" and meta["rounds_done"] == 2
    assert len(json.loads((folder / "campaign.json").read_text())["submissions"]) == 2
    samples = [r for r in records(folder) if r["type"] == "sample"]
    assert {r["round"] for r in samples} == {0, 1}
    assert not [r for r in records(folder) if r["type"] == "slot" and r["status"] == "failed"]
    assert no_process_left(started_pids(servers=True))
    print(f"\ncancel after {t_cancel:.1f} s, resume {t_resume:.1f} s")
