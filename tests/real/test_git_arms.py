"""arms/git-refs.yaml end to end: base against slow of scripts/llama-git-repo.sh's history,
built once into the shared cache (tests/real/test_build.py builds the same keys), then run;
the slow commit's arm is the slower one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.faultkit import cli, only_run

ROOT = Path(__file__).resolve().parents[2]


def test_git_refs_yaml_build_then_run(tmp_path: Path, real_parts: dict[str, str]) -> None:
    cache = Path(os.environ.get("ABBENCH_CACHE") or Path.home() / ".cache" / "abbench")
    out = subprocess.run(["bash", str(ROOT / "scripts" / "llama-git-repo.sh"),
                          str(cache / "test-repos" / "llama-git")],
                         check=True, capture_output=True, text=True).stdout
    env = {"LLAMA_GIT": out.strip().rsplit("=", 1)[1], "SMOLLM2_GGUF": real_parts["model"]}
    p = cli("build", ROOT / "arms" / "git-refs.yaml", env=env, timeout=1800)
    assert p.returncode == 0, p.stderr
    p = cli("build", ROOT / "arms" / "git-refs.yaml", env=env)
    assert p.stdout.count("cache hit") == 2, p.stdout
    results = tmp_path / "results"
    p = cli("run", ROOT / "arms" / "git-refs.yaml", "--rounds", "2", "--results", results,
            "--plain", env=env, timeout=900)
    assert p.returncode == 0, p.stderr
    run = only_run(results)
    rates: dict[str, list[float]] = {}
    for line in (run / "samples.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("type") == "sample" and "decode_tok_s" in r.get("metrics", {}):
            rates.setdefault(r["arm"], []).append(r["metrics"]["decode_tok_s"])
    assert max(rates["slow"]) < min(rates["base"]), rates
    assert (run / "logs" / "build-slow.log").is_file()
