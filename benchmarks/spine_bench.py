"""Benchmarks of the spine (issue: abbench run). One command, a table printed:

    .venv/bin/python benchmarks/spine_bench.py [--rounds 2] [--out docs/spine-bench.md]

1. timing agreement: a real llama-server campaign; median over samples of
   |client decode tok/s / server predicted_per_second - 1|   (goal <= 0.2%)
2. overhead: the share of that campaign's wall time spent outside server start-up,
   requests and quality checks (goal <= 2%), and how late readiness was noticed
   (upper bound; goal <= 100 ms)
3. client capacity: tokens/s that abbench's streaming client parses on one core,
   against the reference server sending prebuilt streams at once (goal >= 50,000)

Needs LLAMA_SERVER and SMOLLM2_GGUF (scripts/setup.sh prints them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abbench.campaign.environment import cpu_model  # noqa: E402
from abbench.campaign.runner import Campaign, RunOptions  # noqa: E402
from abbench.config.loader import load_config  # noqa: E402
from abbench.report.table import timing_agreement  # noqa: E402
from abbench.workload.decode import Client  # noqa: E402


def real_campaign(rounds: int, tmp: Path) -> tuple[float, int, float, float, float]:
    server, model = os.environ["LLAMA_SERVER"], os.environ["SMOLLM2_GGUF"]
    arms = tmp / "arms.yaml"
    common = (f'["{server}", -m, "{model}", --host, "{{host}}", --port, "{{port}}", -t, "1", '
              f'-c, "4096", -np, "1", --no-warmup')
    arms.write_text(textwrap.dedent(f"""
        rounds: {rounds}
        seed: 1
        defaults: {{preset: llama.cpp}}
        arms:
          - name: f16
            start: {common}]
          - name: q8
            start: {common}, --cache-type-k, q8_0, --cache-type-v, q8_0, -fa, "on"]
        workloads:
          - contexts: [512, 2K]
            decode_tokens: 64
        """))
    cfg = load_config(arms)
    out = Campaign(cfg, RunOptions(results=tmp / "results", config_path=str(arms))).execute()
    meta = out.run.meta()
    agree = timing_agreement(out.run.records())
    assert agree is not None, "llama-server sent no timings"
    t = meta["timing"]
    return agree[0], agree[1], t["overhead_s"] / t["wall_s"], t["wall_s"], \
        t["ready_lag_ms_max"]


def client_capacity(tokens: int = 200_000, repeats: int = 3) -> float:
    from abbench.config.arms import ResolvedArm
    from abbench.config.schema import Readiness
    from abbench.server.ports import free_port

    port = free_port("127.0.0.1")
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "refserver.py"), "--port",
                             str(port), "--burst"], stdout=subprocess.DEVNULL)
    try:
        arm = ResolvedArm(name="ref", label="ref", commit=None, preset="llama.cpp", argv=["x"],
                          shell=False, cwd=".", env={}, host="127.0.0.1", port=port,
                          ready=Readiness(), stop_grace=1, request_timeout=120,
                          tokenize_path="/tokenize", completions_path="/v1/completions",
                          props_path=None, request_extra={"n_predict": None})
        client = Client(f"http://127.0.0.1:{port}", arm)
        for _ in range(100):
            try:
                client.get("/health", timeout=1)
                break
            except Exception:
                time.sleep(0.05)
        best = 0.0
        for _ in range(repeats):
            c0 = time.process_time()
            r = client.complete(list(range(8)), tokens)
            cpu = time.process_time() - c0
            assert r.completion_tokens == tokens and r.text.count(" w") == tokens
            best = max(best, tokens / cpu)
        client.close()
        return best
    finally:
        proc.terminate()
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "docs" / "spine-bench.md"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        med, n, share, wall, lag = real_campaign(args.rounds, Path(tmp))
    cap = client_capacity()
    rows = [
        ("timing agreement: median abs(client/server - 1)", f"{med * 100:.4f}% ({n} samples)",
         "<= 0.2%", med <= 0.002),
        ("overhead: wall time outside start-up, requests, checks", f"{share * 100:.3f}% of "
         f"{wall:.0f} s", "<= 2%", share <= 0.02),
        ("readiness noticed after the server answered (upper bound)", f"{lag:.0f} ms",
         "<= 100 ms", lag <= 100),
        ("client capacity: tokens parsed per CPU-second", f"{cap:,.0f} tok/s", ">= 50,000",
         cap >= 50_000),
    ]
    lines = [f"Spine benchmarks, {dt.date.today()}, {cpu_model()} ({os.cpu_count()} cores), "
             f"Python {platform.python_version()}; `python benchmarks/spine_bench.py "
             f"--rounds {args.rounds}`", "",
             "| measure | result | goal | met |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {'yes' if ok else 'NO'} |" for a, b, c, ok in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
