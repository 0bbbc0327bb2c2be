"""How fast are ls, report and history on a store of 10,000 runs?

    .venv/bin/python benchmarks/history_bench.py [--runs 10000] [--dir DIR] [--keep]
        [--markdown docs/history-bench.md]

Generates a synthetic but realistic store (each run: 2 arms, prod at a fixed commit
and pr at a new one, 3 rounds, 2 workloads, the records a real `abbench run`
writes: samples with usage, timings and four metrics, slot records) with
abbench's own store code (``Run.create``/``Run.append``; fsync is switched off
while generating, for speed only). Then times, as the user runs them (a fresh
process each, wall time, median of 3): the index rebuilt from scratch (`abbench
ls` with no index file), `abbench ls`, `abbench report` of the newest run, and a
history plot of one metric over every run. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from abbench.model.records import parse_record
from abbench.store.index import INDEX_FILE, open_index
from abbench.store.run import Run

ROOT = Path(__file__).resolve().parent.parent
ABBENCH = [sys.executable, "-m", "abbench.cli"]
WORKLOADS = [("decode 1K", 1024), ("decode 32K", 32768)]


@contextlib.contextmanager
def no_fsync() -> Iterator[None]:
    real = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real


def generate(results: Path, n: int, seed: int = 7) -> None:
    """``n`` runs, one per hour; pr gets 3% faster at run n/2 and 8% slower at 0.9 n."""
    rng = np.random.default_rng(seed)
    start = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    env = {"host": "bench", "cpu": "AMD EPYC", "cpu_count": 16,
           "gpu_summary": "1x NVIDIA RTX 5080 (driver 575.57)", "gpus": []}
    with no_fsync():
        for i in range(n):
            created = start + dt.timedelta(hours=i)
            speed = {"prod": 1.0, "pr": 1.0 + 0.03 * (i >= n // 2) - 0.08 * (i >= 9 * n // 10)}
            arms = [{"name": "prod", "label": "prod", "commit": "ecb52158", "preset": "llama.cpp"},
                    {"name": "pr", "label": "this PR", "commit": f"{i * 2654435761 % 2**32:08x}",
                     "preset": "llama.cpp"}]
            meta = {"id": f"{created:%Y%m%d-%H%M%S}-{i % 65536:04x}",
                    "created": created.isoformat(), "status": "complete", "abbench": "0.1.0",
                    "arms": arms, "baseline": "prod", "rounds": 3, "reps": 1,
                    "order": "interleaved", "seed": i,
                    "schedule": [[r, p, a] for r in range(3) for p, a in enumerate(speed)],
                    "environment": env, "servers": {}, "rounds_done": 3,
                    "finished": (created + dt.timedelta(minutes=12)).isoformat()}
            run = Run.create(results, meta, {"rounds": 3, "reps": 1, "arms": arms})
            slot = 0
            for rnd in range(3):
                for pos, arm in enumerate(speed):
                    t = created.timestamp() + slot * 60
                    for workload, ctx in WORKLOADS:
                        tok_s = 52.0 * (1.4 if ctx == 1024 else 1.0) * speed[arm] * \
                            float(np.exp(rng.normal(0, 0.01)))
                        ttft = ctx / 3000 * 1e3 * float(np.exp(rng.normal(0, 0.02)))
                        run.append(parse_record({
                            "slot": slot, "arm": arm, "round": rnd, "position": pos,
                            "type": "sample", "rep": 0, "workload": workload, "context": ctx,
                            "decode_tokens": 128, "t": t, "valid": True, "status": "ok",
                            "reason": None,
                            "metrics": {"decode_tok_s": tok_s, "ttft_ms": ttft,
                                        "prefill_tok_s": ctx / ttft * 1e3,
                                        "server_decode_tok_s": tok_s * 1.002},
                            "prompt_tokens": ctx, "completion_tokens": 128, "chunks": 130,
                            "finish_reason": "length",
                            "usage": {"prompt_tokens": ctx, "completion_tokens": 128,
                                      "total_tokens": ctx + 128},
                            "timings": {"prompt_n": ctx, "prompt_ms": ttft, "cache_n": 0,
                                        "predicted_n": 128, "predicted_ms": 127e3 / tok_s,
                                        "predicted_per_second": tok_s * 1.002},
                            "nonce": f"{rng.integers(2**63):016x}"}))
                    run.append(parse_record({
                        "slot": slot, "arm": arm, "round": rnd, "position": pos,
                        "type": "slot", "status": "ok", "reason": None, "t_start": t,
                        "t_end": t + 50, "exit_code": 0, "log": f"logs/{arm}-r{rnd}.log",
                        "ready_s": 2.1}))
                    slot += 1


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(args: list[str], repeat: int = 3) -> tuple[float, float, str]:
    """Median wall and CPU time of a fresh ``abbench`` process, and its stdout."""
    walls, cpus, out = [], [], ""
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), _cpu()
        proc = subprocess.run([*ABBENCH, *args], capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"abbench {' '.join(args)} failed:\n{proc.stderr}")
        out = proc.stdout
    return statistics.median(walls), statistics.median(cpus), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--dir", type=Path, help="store to (re)use; default: a temporary one")
    ap.add_argument("--keep", action="store_true", help="keep the generated store")
    ap.add_argument("--markdown", type=Path, help="also write the table to this file")
    a = ap.parse_args()
    base = a.dir or Path(tempfile.mkdtemp(prefix="abbench-histbench-"))
    results = base / "results"
    load = os.getloadavg()
    try:
        t0 = time.perf_counter()
        if not results.is_dir() or len(list(results.iterdir())) < a.runs:
            shutil.rmtree(results, ignore_errors=True)
            generate(results, a.runs)
        gen_s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in results.rglob("*") if f.is_file())
        n_runs = sum(1 for p in results.iterdir() if p.is_dir())

        (results / INDEX_FILE).unlink(missing_ok=True)
        t0, c0 = time.perf_counter(), time.process_time()
        with open_index(results) as ix:
            n_vals = ix.db.execute("SELECT count(*) FROM vals").fetchone()[0]
        rebuild_in = (time.perf_counter() - t0, time.process_time() - c0)
        (results / INDEX_FILE).unlink(missing_ok=True)
        rebuild_cli = timed(["ls", "--results", str(results)], repeat=1)

        rows = [("generate the store (abbench's store code, no fsync)", gen_s, None, None),
                (f"index rebuilt from scratch, in process ({n_vals} round values)",
                 *rebuild_in, None),
                ("`abbench ls` with no index (rebuild included)", *rebuild_cli[:2], None)]
        ls_s, ls_cpu, ls_out = timed(["ls", "--results", str(results)])
        rows.append((f"`abbench ls` ({len(ls_out.splitlines()) - 1} runs listed)", ls_s, ls_cpu,
                     1.0))
        newest = ls_out.splitlines()[-1].split()[0]
        rows.append(("`abbench report` of the newest run",
                     *timed(["report", newest, "--results", str(results)])[:2], 1.0))
        plot = base / "history.png"
        rows.append((f"`abbench history --metric decode_tok_s --workload 'decode 1K' --out "
                     f"history.png` ({n_runs} runs x 2 labels)",
                     *timed(["history", "--results", str(results), "--metric", "decode_tok_s",
                             "--workload", "decode 1K", "--out", str(plot)])[:2], 5.0))
        check_s, check_cpu, check_out = timed(["history", "--results", str(results), "--check"])
        rows.append(("`abbench history --check` (every table metric)", check_s,
                     check_cpu, None))
        t0, c0 = time.perf_counter(), time.process_time()
        from abbench.history.series import load_samples

        df = load_samples(results)
        rows.append((f"`abbench.load_samples` ({len(df)} rows)", time.perf_counter() - t0,
                     time.process_time() - c0, None))

        lines = [f"History benchmark: {n_runs} runs, {size / 2**20:.0f} MiB on disk; "
                 f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                 f"Python {platform.python_version()}, "
                 f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
                 f"before: {load[0]:.1f}", "",
                 "| step | wall s | CPU s | goal (wall) | met |", "|---|---|---|---|---|"]
        ok = True
        for what, secs, cpu, goal in rows:
            met = "" if goal is None else ("yes" if secs <= goal else "NO")
            ok &= met != "NO"
            cpu_s = "" if cpu is None else f"{cpu:.2f}"
            lines.append(f"| {what} | {secs:.2f} | {cpu_s} | {f'<= {goal:g} s' if goal else ''} "
                         f"| {met} |")
        lines += ["", "Wall and CPU (user + system) time of a fresh process, Python start-up "
                  "included; median of 3.",
                  f"`history --check` said: {check_out.strip().splitlines()[0]}"]
        text = "\n".join(lines) + "\n"
        print(text, end="")
        if a.markdown:
            a.markdown.parent.mkdir(parents=True, exist_ok=True)
            a.markdown.write_text("# History benchmark\n\nCommand: `.venv/bin/python "
                                  "benchmarks/history_bench.py --markdown "
                                  "docs/history-bench.md`\n\n" + text)
        return 0 if ok else 1
    finally:
        if not a.keep and a.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
