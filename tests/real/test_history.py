"""Acceptance on the real llama-server: after two tiny real runs, ls, report,
compare and history work on them, and the plot shows both runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from abbench.history.plot import plot_history
from abbench.history.series import build_series
from abbench.store.index import open_index
from abbench.store.run import list_runs
from tests.conftest import llama_start, no_process_left, started_pids, write_arms
from tests.ref.test_history import cli


def test_two_real_runs_then_every_history_command(real_parts: dict[str, str], tmp_path: Path,
                                                  results: Path) -> None:
    import matplotlib.image as mpimg

    tag = f"abbench-history-{tmp_path.name}"  # other tests may run the same model

    def arm(name: str, label: str, *extra: str) -> str:
        argv = llama_start(real_parts, "--alias", tag, *extra, ctx=512)
        return (f"  - name: {name}\n    label: {label}\n    commit: demo{name}\n"
                f"    start: {json.dumps(argv)}\n")

    arms = write_arms(tmp_path / "arms.yaml", "rounds: 2\nwarmup: 1\n"
                      "defaults: {preset: llama.cpp, ready: {timeout: 120}}\narms:\n"
                      + arm("f16", "KV f16")
                      + arm("q8", "KV q8_0", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0",
                            "-fa", "on")
                      + "workloads:\n  - contexts: [256]\n    decode_tokens: 16\n")
    for _ in range(2):  # as a user runs it: its own process
        proc = subprocess.run([sys.executable, "-m", "abbench.cli", "run", str(arms),
                               "--results", str(results), "--plain"],
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr
    assert no_process_left(started_pids(servers=True))
    ids = [r.id for r in list_runs(results)]
    assert len(ids) == 2

    # this machine is shared: a server may be lost to outside causes; the commands
    # must still work, and the assertions below hold for whatever was measured
    code, out, _ = cli("ls", "--results", results)
    assert code == 0 and len(out.splitlines()) == 3
    assert all("complete" in line and "/2" in line and "KV f16 @demof16 (base)" in line
               and "KV q8_0 @demoq8" in line for line in out.splitlines()[1:])

    code, out, _ = cli("report", ids[1], "--results", results)
    assert code == 0 and "| decode 256 (tok/s) |" in out and "| KV f16 | KV q8_0 |" in out

    code, out, _ = cli("compare", f"{ids[0]}:f16", f"{ids[1]}:f16", "--results", results)
    assert code == 0 and "not interleaved" in out
    row = next(line for line in out.splitlines() if line.startswith("| decode 256"))
    if "no data" not in row:  # the second run's f16 carries its delta against the first
        assert "%" in row

    png = tmp_path / "history.png"
    code, _, err = cli("history", "--results", results, "--metric", "decode_tok_s",
                       "--workload", "decode 256", "--out", png)
    assert code == 0, err
    img = mpimg.imread(png)
    assert img.ndim == 3 and img.shape[1] >= 800
    with open_index(results) as ix:
        summary = plot_history(build_series(ix, ["decode_tok_s"], ["decode 256"]),
                               tmp_path / "history.svg")
    measured = {label: len({r["run_id"] for r in rows}) for label, rows in _valid(results)}
    # one line per arm (named "KV f16 (f16) [model]" in the legend), its runs all there
    assert sorted(summary.panels[0].points.values()) == sorted(measured.values())
    assert sum(measured.values()) >= 3  # both runs on the plot, for at least one label
    code, out, _ = cli("history", "--results", results, "--check", "--threshold", "50")
    assert code == 0 and out.startswith(f"OK: run {ids[1]}")


def _valid(results: Path) -> list[tuple[str, list[dict[str, str]]]]:
    """Per arm label, the runs in which it has a valid decode sample."""
    import abbench

    df = abbench.load_samples(results)
    df = df[(df.metric == "decode_tok_s") & df.valid]
    return [(label, g[["run_id"]].to_dict("records")) for label, g in df.groupby("label")]
