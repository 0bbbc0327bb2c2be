"""report.json and the CSV export of a table."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict
from typing import Any

from abbench.report import quality_text
from abbench.report.summary import summary_of
from abbench.report.tablemodel import Table
from abbench.report.text import csv_cell
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
        "header": [asdict(n) for n in table.header],
        "footer": [asdict(n) for n in table.footer],
        "notes": [asdict(n) for n in table.notes],
        "setup": asdict(table.setup) if table.setup is not None else None,
        "summary": [asdict(a) for a in summary_of(table)],
        "quality": quality_text.to_json(table.quality),
    }
    return json.dumps(out, indent=2, default=str) + "\n"


def _cell(v: Any) -> str:
    """One CSV cell as JSON has it: empty for none, true/false, a list as a;b."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    if isinstance(v, (list, tuple)):
        return ";".join(_cell(x) for x in v)
    return str(v)


def _flat(prefix: str, value: Any) -> dict[str, str]:
    """A nested mapping as flat columns: ``cmp_cv: {base: 0.04}`` -> ``cmp_cv_base``."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flat(f"{prefix}_{k}", v))
        return out
    return {prefix: _cell(value)}


def render_csv(table: Table) -> str:
    """One line per (row, arm): its per-round values and, for the other arms, every
    field of the comparison against the baseline (``cmp_*``), one value per cell:
    the numbers of report.json (empty where it has null), nested fields as columns
    of their own (``cmp_cv_<arm>``), lists as ``a;b``."""
    lines = []
    for r in table.rows + table.hidden:
        for arm in table.arms:
            c = r.cells.get(arm)
            if c is None:
                continue
            cmp = _flat("cmp", as_json(c.comparison)) if c.comparison else {}
            lines.append(({
                "run_id": table.run_id, "workload": r.workload, "metric": r.metric,
                "label": r.label, "unit": r.spec.unit, "direction": r.spec.direction,
                "arm": arm, "arm_label": table.labels[arm],
                "is_baseline": _cell(arm == table.baseline), "rounds": _cell(c.rounds),
                "values": _cell(c.values), "mean": _cell(c.mean), "min": _cell(min(c.values)),
                "max": _cell(max(c.values))}, cmp))
    cmp_cols = sorted({k for _, cmp in lines for k in cmp})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    head = ["run_id", "workload", "metric", "label", "unit", "direction", "arm", "arm_label",
            "is_baseline", "rounds", "values", "mean", "min", "max"]
    w.writerow(head + cmp_cols)
    for base, cmp in lines:
        w.writerow([csv_cell(v) for v in
                    [base[k] for k in head] + [cmp.get(k, "") for k in cmp_cols]])
    return buf.getvalue()
