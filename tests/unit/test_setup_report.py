"""The PR table says what was compared (setup line, each arm's differences from the
baseline, a one-line summary) and renders right on GitHub (checked with
markdown-it-py, a CommonMark parser, with GFM tables)."""

from __future__ import annotations

from pathlib import Path

from markdown_it import MarkdownIt

from abbench.report.setup import flag_diffs
from tests.faultkit import cli

ROOT = Path(__file__).resolve().parents[2]
SEED_RUN = ROOT / "docs" / "examples" / "h200-seed-run"


def test_report_of_the_h200_seed_run_says_what_was_compared() -> None:
    p = cli("report", SEED_RUN)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert ("Setup: server llama.cpp (llama-server), model llama-3.1-8b-synthetic.q4_0.gguf, "
            "Q4_0, 1x NVIDIA H200 (driver 580.159.04); 2 rounds, order interleaved, seed "
            "20261201.") in lines
    assert "Differences from the baseline (prod (KV f16)):" in lines
    assert ("- this PR (KV q8_0, -ub 4096): `-b 4096 (was 2048)`, `-ub 4096 (was 2048)`, "
            "`--cache-type-k q8_0`, `--cache-type-v q8_0`") in lines
    assert "- PR minus -ub 4096: `--cache-type-k q8_0`, `--cache-type-v q8_0`" in lines
    summary = next(x for x in lines if x.startswith("**Summary**"))
    assert ("this PR (KV q8_0, -ub 4096): decode -35.3% at 32K to -46.2% at 128K ▼, peak "
            "VRAM -34.7% ▲; greedy outputs (nonce): 8 of 8 prompts differ") in summary
    assert "▲ better, ▼ worse" in summary
    # the summary sits right under the table, before the legend
    at = lines.index(summary)
    assert lines[at - 1] == "" and lines[at - 2].startswith("| decode 128K misses/token |")


def test_the_report_renders_right_as_github_markdown() -> None:
    text = cli("report", SEED_RUN).stdout
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(text)
    html = md.render(text)
    assert sum(t.type == "table_open" for t in tokens) >= 2  # the PR table, fingerprints
    # numbers right-aligned: every arm column of the PR table
    first_table = html.split("</table>")[0]
    assert first_table.count('<th style="text-align:right">') == 3
    # a line after </details> is a paragraph of its own, not raw HTML run on
    for t in tokens:
        if t.type == "html_block" and "</details>" in t.content:
            assert t.content.strip().endswith("</details>"), t.content
    assert "<p>Memory peaks: sampled every 20 ms" in html


def test_flag_differences_like_compare_llama_bench() -> None:
    base = ["llama-server", "-m", "m.gguf", "--port", "{port}", "-c", "4096", "--metrics"]
    other = ["llama-server", "-m", "m.gguf", "--port", "{port}", "-c", "8192", "-fa", "on"]
    assert flag_diffs(base, other) == ("-c 8192 (was 4096)", "-fa on", "no --metrics")
    assert flag_diffs(base, ["/other/llama-server", *base[1:]]) == (
        "program /other/llama-server (was llama-server)",)


def test_csv_cells_are_flat_and_hold_the_json_numbers() -> None:
    import csv
    import io
    import json

    rows = list(csv.DictReader(io.StringIO(cli("report", SEED_RUN, "--format", "csv").stdout)))
    data = json.loads(cli("report", SEED_RUN, "--format", "json").stdout)
    for r in rows:
        for k, v in r.items():
            if k not in ("label", "arm_label", "cmp_test"):
                assert not any(x in v for x in ("{", "(", "None", "inf", "nan", "True")), (k, v)
    by_key = {(r["workload"], r["metric"], r["arm"]): r for r in rows}
    checked = 0
    for row in data["rows"]:
        if not row["shown"]:
            continue
        for arm, cell in row["cells"].items():
            r = by_key[(row["workload"], row["metric"], arm)]
            assert float(r["mean"]) == cell["mean"]
            comp = cell.get("comparison")
            if comp:
                for k in ("change", "lo", "hi", "p", "hl_lo"):
                    assert r[f"cmp_{k}"] == ("" if comp[k] is None else repr(comp[k]))
                checked += 1
    assert checked >= 8


def test_report_json_carries_setup_and_summary_as_data() -> None:
    """The setup, each arm's differences and the summary are data in report.json (row
    keys, changes as fractions), and the markdown words the same figures."""
    import json

    md = cli("report", SEED_RUN).stdout
    data = json.loads(cli("report", SEED_RUN, "--format", "json").stdout)
    setup = data["setup"]
    assert setup["setup"]["rounds"] == 2 and setup["setup"]["seed"] == 20261201
    assert setup["setup"]["machine"] in md
    for d in setup["diffs"]:
        assert f"- {d['arm']}: " + ", ".join(f"`{f}`" for f in d["flags"]) in md
    summary = {a["arm"]: a for a in data["summary"]}
    assert set(summary) == {a["name"] for a in data["arms"]} - {data["baseline"]}
    for a in summary.values():
        first = a["changed"][0]
        assert first["row"]["metric"] == "decode_tok_s" and first["row"]["context"] == 32768
        assert f"{a['label']}: decode {first['change'] * 100:+.1f}% at 32K" in md
