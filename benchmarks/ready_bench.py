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
import math
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from abbench.config.arms import resolve_arms

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abbench.config.loader import config_from_data  # noqa: E402
from abbench.server import process  # noqa: E402
from abbench.server.process import start_server  # noqa: E402
from benchmarks.tables import emit, machine  # noqa: E402

WATCHED = "log watched, 10 ms polls after it grows (shipped)"
REFSERVER = ROOT / "tests" / "refserver.py"


class Trace:
    """What one life's wait did, on the perf_counter clock: when the log was seen to
    grow, and when each poll was sent."""

    def __init__(self) -> None:
        self.grew: list[float] = []
        self.asked: list[float] = []


TRACE = Trace()


class TracedWatch(process.LogWatch):
    def nap(self, interval: float) -> None:
        before = self.grew_at
        super().nap(interval)
        if self.grew_at != before:
            TRACE.grew.append(self.grew_at)


class TracedTransport(process.Transport):
    def get(self, path: str, *, timeout: float, max_body: int = 65536) -> process.Reply:
        TRACE.asked.append(time.perf_counter())
        return super().get(path, timeout=timeout, max_body=max_body)


def one_life(tmp: Path, i: int, startup: float, watch: bool) -> dict[str, float]:
    """One server life's lags in ms: ``lag`` (true), ``bound`` (reported) and, of the
    true lag, ``said`` (the server's ready line written after its ready instant),
    ``seen`` (that line noticed after it was written, NaN when a timed poll went before),
    ``asked`` (the poll that got 200 sent after the line was noticed, else after the
    ready instant: negative when it was sent before and answered after) and
    ``answered`` (that poll's answer)."""
    cfg = config_from_data({
        "defaults": {"preset": "llama.cpp", "ready": {"timeout": 30},
                     "start": [sys.executable, str(REFSERVER), "--port", "{port}",
                               "--startup", str(startup)]},
        "arms": [{"name": "a"}, {"name": "b"}], "workloads": [{"contexts": [64]}]},
        source=str(tmp / "arms.yaml"))
    arm = resolve_arms(cfg)[0]
    log = tmp / f"life-{i}-{int(watch)}.log"
    TRACE.__init__()  # type: ignore[misc]
    nap = TracedWatch.nap
    if not watch:  # the old way: a plain sleep between polls
        TracedWatch.nap = lambda self, interval: time.sleep(interval)  # type: ignore
    saved = process.LogWatch, process.Transport
    process.LogWatch, process.Transport = TracedWatch, TracedTransport  # type: ignore[misc]
    server = start_server(arm, round_=0, log_path=log, argv_for_port=lambda port: arm.command(
        {"port": str(port), "host": arm.host}))
    try:
        server.wait_ready()
    finally:
        TracedWatch.nap = nap  # type: ignore[method-assign]
        process.LogWatch, process.Transport = saved  # type: ignore[misc]
        server.stop()
    m = re.search(r"ready at ([0-9.]+) \(monotonic\), said at ([0-9.]+)", log.read_text())
    assert m and server.ready_at is not None and server.ready_noticed_lag is not None
    t0, said = float(m.group(1)), float(m.group(2))
    asked = TRACE.asked[-1]
    # the line noticed before the poll that got 200 was sent (else a timed poll found it)
    seen = min((g for g in TRACE.grew if said <= g <= asked), default=math.nan)
    ms = 1e3
    return {"lag": (server.ready_at - t0) * ms, "bound": server.ready_noticed_lag * ms,
            "said": (said - t0) * ms, "seen": (seen - said) * ms,
            "asked": (asked - (t0 if math.isnan(seen) else seen)) * ms,
            "answered": (server.ready_at - asked) * ms}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lives", type=int, default=20)
    ap.add_argument("--startup", type=float, default=1.0, help="seconds before ready")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        got: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for i in range(args.lives):
            for watch in (True, False):  # interleaved: the same machine load for both
                got[watch].append(one_life(Path(d), i, args.startup, watch))
    load_after = os.getloadavg()
    rows, parts = [], []
    for watch, name in ((True, WATCHED), (False, "polling every 50 ms (ready.interval) alone")):
        lives = got[watch]
        lags = sorted(x["lag"] for x in lives)
        rows.append(f"| {name} | {len(lags)} | {statistics.median(lags):.1f} | "
                    f"{lags[int(0.9 * (len(lags) - 1))]:.1f} | {max(lags):.1f} | "
                    f"{max(x['bound'] for x in lives):.1f} |")
        worst = max(lives, key=lambda x: x["lag"])
        cells = []
        for k in ("said", "seen", "asked", "answered"):
            v = [x[k] for x in lives if not math.isnan(x[k])]
            cells.append(f"{statistics.median(v):.1f} / {max(v):.1f} / {worst[k]:.1f}"
                         if v else "–")
        parts.append(f"| {name} | " + " | ".join(cells) + " |")
    head = (f"Readiness, {machine()}: `python benchmarks/ready_bench.py "
            f"--lives {args.lives}`; the reference server ready {args.startup:g} s after its "
            f"start, each life run both ways in turn; load average {load[0]:.2f} before, "
            f"{load_after[0]:.2f} after.\n\n"
            "| wait | lives | true lag p50 (ms) | p90 | max | reported bound max (ms) |\n"
            "|---|---|---|---|---|---|")
    split = ("Where the true lag went (ms; p50 / max / in the slowest life): the server's "
             "ready line written after its ready instant (said), noticed after it was "
             "written (seen), the poll that got 200 sent after that (asked), and its "
             "answer (answered).\n\n"
             "| wait | said | seen | asked | answered |\n|---|---|---|---|---|")
    text = head + "\n" + "\n".join(rows) + "\n\n" + split + "\n" + "\n".join(parts) + "\n"
    return emit(text, args.out)


if __name__ == "__main__":
    sys.exit(main())
