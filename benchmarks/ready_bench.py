"""How late abbench notices a server's readiness. One command, a table printed:

    .venv/bin/python benchmarks/ready_bench.py [--lives 20] [--out docs/ready-bench.md]

The reference server (tests/refserver.py --startup S) answers /health 200 from a known
instant on the machine's monotonic clock, and logs a line at that instant, as real
servers log when they finish loading. abbench's Server.wait_ready runs as in a
campaign; its ready_at (perf_counter: the same clock on Linux) minus that instant is
the true lag; ready_noticed_lag is the bound the report prints (time since the last
failed poll was sent). Each life is measured twice: as shipped (the log watched, fast
polls after it grows) and with polling alone every ready.interval (the old way).
Goal: readiness noticed within 25 ms of the server answering.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from abbench.config.arms import resolve_arms

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abbench.campaign.environment import cpu_model  # noqa: E402
from abbench.config.loader import config_from_data  # noqa: E402
from abbench.server import process  # noqa: E402
from abbench.server.process import start_server  # noqa: E402

REFSERVER = ROOT / "tests" / "refserver.py"


def one_life(tmp: Path, i: int, startup: float, watch: bool) -> tuple[float, float]:
    """(true lag, reported bound) in ms of one server life."""
    cfg = config_from_data({
        "defaults": {"preset": "llama.cpp", "ready": {"timeout": 30},
                     "start": [sys.executable, str(REFSERVER), "--port", "{port}",
                               "--startup", str(startup)]},
        "arms": [{"name": "a"}, {"name": "b"}], "workloads": [{"contexts": [64]}]},
        source=str(tmp / "arms.yaml"))
    arm = resolve_arms(cfg)[0]
    log = tmp / f"life-{i}-{int(watch)}.log"
    nap = process.LogWatch.nap
    if not watch:  # the old way: a plain sleep between polls
        process.LogWatch.nap = lambda self, interval: time.sleep(interval)  # type: ignore
    server = start_server(arm, round_=0, log_path=log, argv_for_port=lambda port: arm.command(
        {"port": str(port), "host": arm.host}))
    try:
        server.wait_ready()
    finally:
        process.LogWatch.nap = nap  # type: ignore[method-assign]
        server.stop()
    m = re.search(r"ready at ([0-9.]+)", log.read_text())
    assert m and server.ready_at is not None and server.ready_noticed_lag is not None
    return (server.ready_at - float(m.group(1))) * 1e3, server.ready_noticed_lag * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lives", type=int, default=20)
    ap.add_argument("--startup", type=float, default=1.0, help="seconds before ready")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for i in range(args.lives):
            for watch in (True, False):  # interleaved: the same machine load for both
                got[watch].append(one_life(Path(d), i, args.startup, watch))
    for watch, name in ((True, "log watched, 10 ms polls after it grows (shipped)"),
                        (False, "polling every 50 ms (ready.interval) alone")):
        lags = sorted(x for x, _ in got[watch])
        bounds = [b for _, b in got[watch]]
        rows.append(f"| {name} | {len(lags)} | {statistics.median(lags):.1f} | "
                    f"{lags[int(0.9 * (len(lags) - 1))]:.1f} | {max(lags):.1f} | "
                    f"{max(bounds):.1f} |")
    head = (f"Readiness, {dt.date.today()}, {cpu_model()} ({platform.python_version()}): "
            f"`python benchmarks/ready_bench.py --lives {args.lives}`; the reference server "
            f"ready {args.startup:g} s after its start, each life run both ways in turn.\n\n"
            "| wait | lives | true lag p50 (ms) | p90 | max | reported bound max (ms) |\n"
            "|---|---|---|---|---|---|")
    text = head + "\n" + "\n".join(rows) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
