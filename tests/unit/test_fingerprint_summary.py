"""The one-line-per-arm fingerprint summary above the per-set tables: "New cold
fingerprints: code 1aada00bdb67844d, ...", "47 of 60 cold nonce prompts differ"."""

from __future__ import annotations

from typing import Any

from abbench.model.records import parse_records
from abbench.report.quality_summary import summarize
from abbench.report.quality_text import fingerprint_summary, render_section
from abbench.report.table import Table


def _records(outputs: dict[str, dict[str, list[str | None]]]) -> list[dict[str, Any]]:
    """arm -> set -> outputs of one cold pass in round 0 (None: the request failed)."""
    out: list[dict[str, Any]] = []
    for arm, sets in outputs.items():
        for name, texts in sets.items():
            base = {"arm": arm, "round": 0, "pass": "cold", "set": name}
            for i, t in enumerate(texts):
                out.append({**base, "type": "fingerprint_output", "id": f"p{i}", "index": i,
                            "text": t, "tokens": []})
            ok = all(t is not None for t in texts)
            out.append({**base, "type": "fingerprint", "prompts": len(texts),
                        "max_tokens": 8, "fingerprint": ("f" + "".join(
                            t or "" for t in texts))[:16].ljust(16, "0") if ok else None})
    return out


def _table(records: list[dict[str, Any]], arms: list[str]) -> Table:
    t = Table(run_id="r", arms=arms, labels={a: a.upper() for a in arms}, baseline=arms[0],
              rows=[], header="")
    t.quality = summarize(parse_records(records), arms, arms[0])
    return t


def test_one_line_per_arm() -> None:
    recs = _records({
        "base": {"code": ["a", "b", "c"], "think": ["x", "y"]},
        "new": {"code": ["a", "B", "C"], "think": ["x", "y"]},
        "same": {"code": ["a", "b", "c"], "think": ["x", "y"]},
        "broken": {"code": ["a", None, "c"], "think": ["X", "Y"]},
    })
    table = _table(recs, ["base", "new", "same", "broken"])
    assert table.quality is not None
    lines = fingerprint_summary(table, table.quality)
    assert lines[:3] == ["", "Cold fingerprints (the first requests after each start), "
                         "per arm:", ""]
    base, new, same, broken = lines[3:]
    assert base == "- **BASE (baseline)**: Cold fingerprints: code fabc000000000000, " \
                   "think fxy0000000000000."
    assert new == ("- **NEW**: New cold fingerprints: code faBC000000000000. As the "
                   "baseline's: think. 2 of 3 cold code prompts differ, 0 of 2 cold think "
                   "prompts differ.")
    assert same == ("- **SAME**: Cold fingerprints as the baseline's: code, think. 0 of 3 "
                    "cold code prompts differ, 0 of 2 cold think prompts differ.")
    assert broken == ("- **BROKEN**: New cold fingerprints: think fXY0000000000000. 0 of 2 "
                      "cold code prompts differ, 2 of 2 cold think prompts differ. No cold "
                      "fingerprint (a request failed): code.")
    # above the per-set tables, which stay
    section = render_section(table)
    assert section[:len(lines)] == lines
    assert sum(line.startswith("Greedy outputs, prompt set") for line in section) == 2


def test_no_summary_with_one_arm_fingerprinted() -> None:
    table = _table(_records({"base": {"code": ["a"]}}), ["base", "other"])
    assert table.quality is not None
    assert fingerprint_summary(table, table.quality) == []
    assert any(line.startswith("Greedy outputs") for line in render_section(table))
