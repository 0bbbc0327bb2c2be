"""Campaigns over many hosts against the reference server, without a scheduler: the
plan, ``abbench shard run`` by hand and from JOB_COMPLETION_INDEX (a Kubernetes
Indexed Job), gather, resume of a campaign, and a gathered run read by every reader."""

from __future__ import annotations

import json
from pathlib import Path

import abbench
from abbench.campaign.shards import host_name
from tests.faultkit import cli, own_refserver, ref_arms, wait_gone


def _plan(tmp_path: Path, results: Path) -> tuple[Path, Path]:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": ["--rate", "110"]},
                    rounds=4, fingerprints={"sets": [{"name": "nonce",
                                                      "nonce": {"count": 2, "words": 8}}],
                                            "max_tokens": 4})
    p = cli("run", arms, "--shards", "2", "--results", results)
    assert p.returncode == 0, p.stderr
    (folder,) = [q for q in results.iterdir() if (q / "campaign.json").is_file()]
    assert f"abbench shard run {folder} --index 1" in p.stdout
    assert "JOB_COMPLETION_INDEX" in p.stdout and f"abbench gather {folder}" in p.stdout
    return folder, ref


def test_shards_by_hand_then_gather(tmp_path: Path, results: Path) -> None:
    folder, _ref = _plan(tmp_path, results)
    host = host_name()
    p = cli("shard", "run", folder, "--index", "0", "--plain")
    assert p.returncode == 0, p.stderr
    assert f"shard 0: ran in {folder}/shards/0-{host}" in p.stderr
    # a Kubernetes Indexed Job gives the index in JOB_COMPLETION_INDEX
    p = cli("shard", "run", folder, "--plain", env={"JOB_COMPLETION_INDEX": "1"})
    assert p.returncode == 0, p.stderr
    again = cli("shard", "run", folder, "--index", "1")
    assert again.returncode == 0 and "shard 1 is complete: 2 of 2 rounds" in again.stderr
    meta1 = json.loads((folder / "shards" / f"1-{host}" / "run.json").read_text())
    assert meta1["shard"]["rounds"] == [2, 3] and meta1["order_seed"] != meta1["seed"]
    assert meta1["host_fingerprint"]["hostname"]

    g = cli("gather", folder)
    assert g.returncode == 0, g.stderr
    assert f"`0-{host}` 2 rounds" in g.stdout and f"`1-{host}` 2 rounds" in g.stdout
    assert "| decode 64 (tok/s) |" in g.stdout and "▲" in g.stdout
    assert "<summary>Per host</summary>" in (folder / "report.md").read_text()
    # one nonce prompt set for the whole campaign: the shards' seeds differ, not its
    recs = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    seeds = {r["seed"] for r in recs if r["type"] == "fingerprint"}
    assert seeds == {7}, seeds  # the campaign's seed (the arms file's seed: 7)
    # a gathered run is a run: ls, report, compare, history, load_samples
    ls = cli("ls", "--results", results)
    assert folder.name in ls.stdout and "4/4" in ls.stdout and "complete" in ls.stdout
    rep = cli("report", folder.name[:15], "--results", results)
    assert rep.returncode == 0 and rep.stdout == (folder / "report.md").read_text()
    js = cli("report", folder.name, "--results", results, "--format", "json")
    cells = json.loads(js.stdout)["rows"][0]["cells"]
    # hosts are blocks: pooled where the two shards agree, random effects where their
    # lives differ (the F test decides; both happen on a loaded machine)
    blocks = [c["comparison"] for c in cells.values()
              if isinstance(c, dict) and c.get("comparison")]
    assert blocks and all(b.get("method") in ("pooled", "random") and len(b["hosts"]) == 2
                          for b in blocks), cells
    cmp = cli("compare", f"{folder.name}:a", f"{folder.name}:b", "--results", results)
    assert cmp.returncode == 0 and "| decode 64 (tok/s) |" in cmp.stdout
    hist = cli("history", "--results", results, "--metric", "decode_tok_s")
    assert hist.returncode == 0 and folder.name in hist.stdout
    df = abbench.load_samples(results)
    assert set(df["host"]) == {f"0-{host}", f"1-{host}"}
    assert set(df[df["host"] == f"1-{host}"]["round"]) == {2, 3}
    wait_gone()


def test_resume_of_a_campaign_without_a_scheduler(tmp_path: Path, results: Path) -> None:
    folder, _ref = _plan(tmp_path, results)
    assert cli("shard", "run", folder, "--index", "1").returncode == 0
    p = cli("run", "--resume", folder.name, "--results", results, "--plain")
    assert p.returncode == 1
    assert f"shard 0 is short of its rounds: run `abbench shard run {folder} --index 0`" \
        in p.stderr
    assert "not run: shard 0 ended short of its rounds; the shard never began" in \
        (folder / "report.md").read_text()
    assert json.loads((folder / "run.json").read_text())["status"] == "interrupted"
    assert cli("shard", "run", folder, "--index", "0").returncode == 0
    p = cli("run", "--resume", str(folder), "--plain")
    assert p.returncode == 0, p.stderr
    assert "Failed:" not in (folder / "report.md").read_text()
    bad = cli("shard", "run", folder, "--index", "5")
    assert bad.returncode == 2 and "the campaign has no shard 5" in bad.stderr
    wait_gone()
