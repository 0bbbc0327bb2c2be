"""arms/git-refs.yaml end to end: base against slow of scripts/llama-git-repo.sh's history,
built once into the shared cache (tests/real/test_build.py builds the same keys), then run;
the slow commit's arm is the slower one."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tests.conftest import CPU_HEAVY
from tests.faultkit import cli, only_run
from tests.gitkit import llama_git_repo

pytestmark = CPU_HEAVY

ROOT = Path(__file__).resolve().parents[2]


def test_git_refs_yaml_build_then_run(tmp_path: Path, real_parts: dict[str, str]) -> None:
    env = {"LLAMA_GIT": str(llama_git_repo()), "SMOLLM2_GGUF": real_parts["model"]}
    p = cli("build", ROOT / "arms" / "git-refs.yaml", env=env, timeout=1800)
    assert p.returncode == 0, p.stderr
    p = cli("build", ROOT / "arms" / "git-refs.yaml", env=env)
    assert p.stdout.count("cache hit") == 2, p.stdout
    results = tmp_path / "results"
    p = cli("run", ROOT / "arms" / "git-refs.yaml", "--rounds", "3", "--results", results,
            "--plain", env=env, timeout=900)
    assert p.returncode == 0, p.stderr
    run = only_run(results)
    rates: dict[str, dict[int, float]] = {}
    for line in (run / "samples.jsonl").read_text().splitlines():
        r = json.loads(line)
        m = r.get("metrics", {}) if r.get("type") == "sample" else {}
        if "decode_tok_s" in m:  # the server's own rate where it sends one: less jitter
            rates.setdefault(r["arm"], {})[r["round"]] = m.get("server_decode_tok_s",
                                                               m["decode_tok_s"])
    # paired by round, as abbench compares: the planted busy loop costs ~33% per token,
    # far beyond a loaded VM's round-to-round jitter once three rounds are averaged
    ratios = [math.log(rates["slow"][k] / rates["base"][k]) for k in rates["base"]]
    assert len(ratios) == 3 and sum(ratios) / 3 < math.log(0.9), rates
    assert (run / "logs" / "build-slow.log").is_file()
