"""One door into a table: --until-ci decides on the table the report renders. A run
whose candidate fails one server life (the round leaves the comparison, its partner's
samples stay in samples.jsonl): the cells --until-ci watched are report.json's cells."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from abbench.campaign.until_ci import watched_comparisons
from abbench.cli import app
from abbench.config.stats import StatsConfig
from abbench.report.table import compute_table
from abbench.stats.paired import as_json
from abbench.store.run import Run
from tests.conftest import REFSERVER, write_arms

FAIL_FIRST = """\
import os, sys
mark = sys.argv[1]
if not os.path.exists(mark):
    open(mark, "w").close()
    print("fails its first life on purpose", flush=True)
    sys.exit(3)
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def test_until_ci_watches_the_cells_report_json_shows(tmp_path: Path, results: Path) -> None:
    wrapper = tmp_path / "fail_first.py"
    wrapper.write_text(FAIL_FIRST)
    slow = json.dumps([sys.executable, str(REFSERVER), "--port", "{port}", "--rate", "400"])
    fast = json.dumps([sys.executable, str(wrapper), str(tmp_path / "failed-once"),
                       str(REFSERVER), "--port", "{port}", "--rate", "600"])
    arms = write_arms(tmp_path / "arms.yaml", f"""
        rounds: 2
        seed: 5
        warmup: 0
        defaults: {{preset: llama.cpp, ready: {{path: /health, timeout: 30}}}}
        arms:
          - {{name: slow, start: {slow}}}
          - {{name: fast, start: {fast}}}
        workloads:
          - contexts: [64]
            decode_tokens: 24
        stats: {{until_ci: 0.01%, max_rounds: 4}}
        """)
    res = CliRunner().invoke(app, ["run", str(arms), "--results", str(results), "--plain"])
    assert res.exit_code == 1, res.output  # a failed life: exit 1, the rest measured
    run = Run(next(results.iterdir()))
    records, meta = run.records(), run.meta()
    failed = [r for r in records if getattr(r, "failed", False)]
    assert [(r.arm, r.status) for r in failed] == [("fast", "failed")]
    dropped = failed[0].round
    assert any(r.arm == "slow" and r.round == dropped for r in records
               if getattr(r, "type", "") == "sample")  # the partner's samples are stored
    assert meta["until_ci"]["stopped"]

    report = json.loads((run.path / "report.json").read_text())
    shown = [c["comparison"] for row in report["rows"] if row["shown"]
             for arm, c in row["cells"].items() if arm != report["baseline"]
             and "comparison" in c]
    settings = StatsConfig.model_validate(meta["stats"]).model_copy(
        update={"alpha": meta["until_ci"]["alpha_report"]})
    watched = watched_comparisons(records, meta, settings)
    assert shown and [as_json(c) for c in watched if c is not None] == shown
    assert all(dropped not in c["rounds"] for row in report["rows"]
               for c in row["cells"].values())
    # the other door (every stored sample): the failed round's partner joins the cells,
    # and the comparisons differ from the report's
    unfiltered = compute_table(records, meta, settings=settings)
    assert any(dropped in c.rounds for row in unfiltered.rows for c in row.cells.values())
    old = [as_json(c.comparison) for row in unfiltered.rows for a, c in row.cells.items()
           if a != unfiltered.baseline and c.comparison is not None]
    assert old != shown  # so the check above tells the two doors apart
