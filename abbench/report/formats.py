"""report.json and the CSV export of a table."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict

from abbench.report import quality_text
from abbench.report.setup import summary_of
from abbench.report.table import Table
from abbench.stats.paired import as_json


def render_json(table: Table) -> str:
    out = {
        "run_id": table.run_id,
        "baseline": table.baseline,
        "arms": [{"name": a, "label": table.labels[a]} for a in table.arms],
        "rows": [
            {
                "workload": r.workload,
                "metric": r.metric,
                "label": r.label,
                "unit": r.spec.unit,
                "direction": r.spec.direction,
                "shown": shown,
                "context": r.key.context,
                "decode_tokens": r.key.decode_tokens,
                "cells": {
                    a: {
                        "rounds": c.rounds,
                        "values": c.values,
                        "mean": c.mean,
                        **({"verdict": c.comparison.verdict,
                            "comparison": as_json(c.comparison)} if c.comparison else {}),
                    }
                    for a, c in r.cells.items()
                },
            }
            for rows, shown in ((table.rows, True), (table.hidden, False)) for r in rows
        ],
        "invalid": table.invalid,
        "failed": [{"arm": f.arm, "round": f.round, "reason": f.reason}
                   for f in table.failed_slots],
        "footer": table.footer,
        "setup": asdict(table.setup) if table.setup is not None else None,
        "summary": summary_of(table),
        "quality": quality_text.to_json(table.quality),
    }
    return json.dumps(out, indent=2, default=str) + "\n"


def render_csv(table: Table) -> str:
    """One line per (row, arm): its per-round values and, for the other arms, every
    field of the comparison against the baseline (``cmp_*``)."""
    cmp_fields = sorted({k for r in table.rows for c in r.cells.values() if c.comparison
                         for k in asdict(c.comparison)})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["run_id", "workload", "metric", "label", "unit", "direction", "arm",
                "arm_label", "is_baseline", "rounds", "values", "mean", "min", "max",
                *(f"cmp_{k}" for k in cmp_fields)])
    for r in table.rows + table.hidden:
        for arm in table.arms:
            c = r.cells.get(arm)
            if c is None:
                continue
            cmp = asdict(c.comparison) if c.comparison else {}
            w.writerow([table.run_id, r.workload, r.metric, r.label, r.spec.unit,
                        r.spec.direction, arm, table.labels[arm], arm == table.baseline,
                        ";".join(map(str, c.rounds)), ";".join(repr(v) for v in c.values),
                        repr(c.mean), repr(min(c.values)), repr(max(c.values)),
                        *(cmp.get(k, "") for k in cmp_fields)])
    return buf.getvalue()
