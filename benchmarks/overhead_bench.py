"""abbench's own time in a campaign: the harness overhead, per server life, and where
it goes. One command, a table printed:

    .venv/bin/python benchmarks/overhead_bench.py [--rounds 6] [--out docs/overhead-bench.md]

A campaign of two arms against the reference server (tests/refserver.py, ready at
once, 64-token decodes at 2,000 tok/s: the lives are short, so abbench's fixed costs
per life stand out) runs through the real runner. The overhead is what the report's
footer prints: wall time outside server start-up/stop, requests and quality checks
(run.json's ``timing``). A thread samples the runner's stack every 2 ms while it is
outside those buckets and charges each sample to the innermost abbench function (and
its caller), so the table says which fixed costs make the overhead.
Goal (issue 29): overhead <= 0.25% of a campaign's wall time.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abbench.campaign import runner  # noqa: E402
from abbench.config.loader import load_config  # noqa: E402
from benchmarks.tables import emit, machine  # noqa: E402

REFSERVER = ROOT / "tests" / "refserver.py"
PKG = str(ROOT / "abbench")
SAMPLE_S = 0.002


class Sampler:
    """Samples the main thread's stack while the runner is outside its timed buckets."""

    def __init__(self) -> None:
        self.inside = 0
        self.hits: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self.fsyncs: list[float] = []
        self.done = threading.Event()
        self.main = threading.main_thread().ident

    def where(self, frame: FrameType | None) -> str:
        chain = []
        while frame is not None and len(chain) < 2:
            f = frame.f_code.co_filename
            if f.startswith(PKG):
                chain.append(f"{Path(f).relative_to(ROOT)}:{frame.f_code.co_name}")
            frame = frame.f_back
        return " < ".join(chain) or "(outside abbench)"

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            if self.inside:
                continue
            frame = sys._current_frames().get(self.main or 0)
            self.hits[self.where(frame)] += 1
            self.samples += 1

    @contextlib.contextmanager
    def bucket(self, timing: runner.Timing, what: str) -> Iterator[None]:
        self.inside += 1
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(timing, what, getattr(timing, what) + time.perf_counter() - t0)
            self.inside -= 1


def campaign(tmp: Path, rounds: int, sampler: Sampler) -> dict[str, float]:
    start = (f'[{sys.executable}, {REFSERVER}, --port, "{{port}}", --rate, "2000"]')
    arms = tmp / "arms.yaml"
    arms.write_text(textwrap.dedent(f"""
        rounds: {rounds}
        seed: 1
        warmup: 1
        defaults: {{preset: llama.cpp}}
        arms:
          - {{name: a, start: {start}}}
          - {{name: b, start: {start}}}
        workloads:
          - contexts: [64, 256]
            decode_tokens: 64
        """))
    cfg = load_config(arms)
    original, as_dict = runner.Timing.count, runner.Timing.as_dict

    def timing_now(timing: runner.Timing) -> dict[str, object]:
        sampler.done.set()  # the overhead is taken now: what follows (the report) is not
        return as_dict(timing)

    runner.Timing.count = lambda self, what: sampler.bucket(self, what)  # type: ignore
    runner.Timing.as_dict = timing_now  # type: ignore[method-assign]
    fsync = os.fsync

    def timed_fsync(fd: int) -> None:  # every fsync abbench makes, counted and timed
        t0 = time.perf_counter()
        fsync(fd)
        if not sampler.done.is_set():
            sampler.fsyncs.append(time.perf_counter() - t0)

    os.fsync = timed_fsync
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    try:
        out = runner.Campaign(cfg, runner.RunOptions(results=tmp / "results",
                                                     config_path=str(arms))).execute()
    finally:
        sampler.done.set()
        thread.join()
        runner.Timing.count, runner.Timing.as_dict = original, as_dict  # type: ignore
        os.fsync = fsync
    t = out.run.meta()["timing"]
    return {k: float(v) for k, v in t.items() if isinstance(v, (int, float))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load = os.getloadavg()
    sampler = Sampler()
    with tempfile.TemporaryDirectory() as d:
        t = campaign(Path(d), args.rounds, sampler)
    load_after = os.getloadavg()
    lives = 2 * args.rounds
    per_life = t["overhead_s"] / lives
    head = (f"Harness overhead, {machine()}: `python benchmarks/overhead_bench.py "
            f"--rounds {args.rounds}`; {lives} reference-server lives (2 arms, 2 contexts, "
            f"64-token decodes), load average {load[0]:.2f} before, {load_after[0]:.2f} "
            "after.\n\n"
            "| wall (s) | server start/stop (s) | requests (s) | overhead (s) | per life (ms) "
            "| share | a life this long or longer meets 0.25% (s) |\n"
            "|---:|---:|---:|---:|---:|---:|---:|\n"
            f"| {t['wall_s']:.2f} | {t['server_s']:.2f} | {t['requests_s']:.2f} | "
            f"{t['overhead_s']:.3f} | {per_life * 1e3:.1f} | "
            f"{t['overhead_s'] / t['wall_s'] * 100:.2f}% | {per_life / 0.0025:.1f} |")
    rows = [f"| {where} | {n} | {n * SAMPLE_S * 1e3 / lives:.1f} |"
            for where, n in sampler.hits.most_common(args.top)]
    split = (f"Where the overhead went: {sampler.samples} stack samples every "
             f"{SAMPLE_S * 1e3:g} ms outside the timed buckets, by innermost abbench "
             "function (< its caller); ms per life is samples x interval / lives, an "
             "estimate.\n\n| where | samples | ms per life |\n|---|---:|---:|\n"
             + "\n".join(rows))
    f = sorted(sampler.fsyncs)
    syncs = (f"fsync: {len(f)} in the campaign ({len(f) / lives:.1f} per life), "
             f"{sum(f) * 1e3:.0f} ms in all ({sum(f) / t['overhead_s'] * 100:.0f}% of the "
             f"overhead), p50 {statistics.median(f) * 1e3:.2f} ms, max {f[-1] * 1e3:.2f} ms "
             "each." if f else "fsync: none timed.")
    text = head + "\n\n" + syncs + "\n\n" + split + "\n"
    return emit(text, args.out)


if __name__ == "__main__":
    sys.exit(main())
