"""Check a run's peak VRAM against nvidia-smi logs taken during it.

Usage: python scripts/smi_compare.py RUN_DIR SMI_APPS_CSV SMI_GPU_CSV
(the CSVs as scripts/h200.sh writes them with nvidia-smi -lms 200; timestamps UTC).
Prints one markdown row per server life: abbench's peak over the process tree and
device, and nvidia-smi's maxima over the same life.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path


def _ts(s: str) -> float:
    t = dt.datetime.strptime(s.strip(), "%Y/%m/%d %H:%M:%S.%f")
    return t.replace(tzinfo=dt.timezone.utc).timestamp()


def _mib(s: str) -> int:
    return int(s.split()[0])


def main(run_dir: str, apps_csv: str, gpu_csv: str) -> None:
    recs = [json.loads(line) for line in Path(run_dir, "samples.jsonl").read_text().splitlines()]
    slots = {r["slot"]: r for r in recs if r["type"] == "slot"}
    life = {r["slot"]: r for r in recs if r.get("collector") == "vram"
            and r.get("window") == "server"}
    apps = [(_ts(p[0]), _mib(p[3])) for p in
            (line.split(",") for line in Path(apps_csv).read_text().splitlines()[1:])
            if len(p) == 4 and p[3].strip().endswith("MiB")]
    gpu = [(_ts(p[0]), _mib(p[1])) for p in
           (line.split(",") for line in Path(gpu_csv).read_text().splitlines()[1:])
           if len(p) > 2 and p[1].strip().endswith("MiB")]
    print("| round | arm | abbench peak VRAM (MiB) | nvidia-smi max used_memory of the server "
          "(MiB) | abbench peak device VRAM (MiB) | nvidia-smi max memory.used (MiB) | "
          "abbench samples |")
    print("|---|---|---|---|---|---|---|")
    for i in sorted(slots):
        s, v = slots[i], life.get(i)
        if v is None:
            continue
        a = max((m for t, m in apps if s["t_start"] <= t <= s["t_end"]), default=None)
        g = max((m for t, m in gpu if s["t_start"] <= t <= s["t_end"]), default=None)
        m = v["metrics"]
        print(f"| {s['round']} | {s['arm']} | {m.get('peak_vram_mib', float('nan')):.0f} | {a} "
              f"| {m.get('device_vram_mib', float('nan')):.0f} | {g} | {v['n_samples']} |")


if __name__ == "__main__":
    main(*sys.argv[1:4])
