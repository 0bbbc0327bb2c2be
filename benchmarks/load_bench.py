"""abbench's own memory over a long campaign: 500 measured requests against the
reference server (tests/refserver.py), peak and current RSS of the abbench process
printed every 100 requests. Flat means nothing grows with the number of samples
(they go to disk, not to memory).

    .venv/bin/python benchmarks/load_bench.py [--requests 500] [--lives 10]

Prints a markdown table (kept in docs/load-bench.md).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from abbench.campaign.runner import Campaign, RunOptions
from abbench.config.loader import load_config

ROOT = Path(__file__).resolve().parent.parent


class CountingCampaign(Campaign):
    """A campaign that notes abbench's RSS after every ``every`` stored samples."""

    every = 100

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.samples = 0
        self.rows: list[tuple[int, float, float, float, int]] = []
        self.t0 = time.perf_counter()

    def record(self, rec: dict[str, Any]) -> None:
        super().record(rec)
        if rec.get("type") != "sample":
            return
        self.samples += 1
        if self.samples % self.every == 0:
            assert self.run is not None
            peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            rss_mib = psutil.Process().memory_info().rss / 2**20
            self.rows.append((self.samples, peak_mib, rss_mib, time.perf_counter() - self.t0,
                              self.run.samples_path.stat().st_size))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=500, help="measured requests in all")
    ap.add_argument("--lives", type=int, default=10, help="server lives (arms x rounds)")
    args = ap.parse_args()
    if args.lives % 2 or args.requests % args.lives:
        ap.error("--lives must be even and divide --requests")
    with tempfile.TemporaryDirectory(prefix="abbench-load-") as tmp:
        arms = Path(tmp) / "arms.yaml"
        start = [sys.executable, str(ROOT / "tests" / "refserver.py"), "--port", "{port}",
                 "--rate", "0"]
        arms.write_text(yaml.safe_dump({
            "rounds": args.lives // 2, "reps": args.requests // args.lives, "warmup": 1,
            "seed": 1,
            "defaults": {"preset": "llama.cpp", "ready": {"timeout": 30}, "stop_grace": 3},
            "arms": [{"name": "a", "start": start}, {"name": "b", "start": start}],
            "workloads": [{"contexts": [256], "decode_tokens": 32}],
        }))
        cfg = load_config(arms)
        camp = CountingCampaign(cfg, RunOptions(results=Path(tmp) / "results",
                                                config_path=str(arms)))
        outcome = camp.execute()
        n_lines = len(outcome.run.records())
    print(f"abbench load benchmark: {args.requests} measured requests (+{args.lives} warm-up) "
          f"in {args.lives} server lives of the reference server (256-token prompts, 32 "
          f"decode tokens); run status {outcome.status}, {n_lines} records stored.\n")
    print("| requests | peak RSS (MiB) | RSS now (MiB) | elapsed (s) | samples.jsonl (KiB) |")
    print("|---:|---:|---:|---:|---:|")
    for n, peak, rss, t, size in camp.rows:
        print(f"| {n} | {peak:.1f} | {rss:.1f} | {t:.1f} | {size / 1024:.0f} |")
    first, last = camp.rows[0], camp.rows[-1]
    print(f"\nPeak RSS at {first[0]} requests: {first[1]:.1f} MiB; at {last[0]} requests: "
          f"{last[1]:.1f} MiB ({last[1] - first[1]:+.1f} MiB, "
          f"{(last[1] / first[1] - 1) * 100:+.1f}%).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
