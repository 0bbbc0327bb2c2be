"""The README is for users (short, a table of contents, Install and Quick start
first), and every relative link of README.md and docs/ resolves: to a file, and an
anchor to a heading of that file (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def test_readme_is_for_users() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 350
    heads = [ln for ln in lines if ln.startswith("## ")]
    assert heads[:4] == ["## Contents", "## Install", "## Quick start", "## The arms file"]
    assert "pip install ." in text
    assert heads[-1] == "## More"


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_relative_links_resolve(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{path.name}: {target} does not exist"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{path.name}: no heading #{anchor} in {dest.name}"


def _rows(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("| ") and ln.count(" | ") >= 2]


def test_quoted_report_rows_are_what_the_run_folders_render() -> None:
    """A table row the docs quote from a stored example run (same row label and
    baseline cell, same number of cells) is one its report.md has, word for word:
    the report.md files re-render byte-identical (test_golden), so a quote that differs
    is from an older rule."""
    stored: dict[tuple[str, str, int], set[str]] = {}
    for report in (ROOT / "docs" / "examples").rglob("report.md"):
        for row in _rows(report.read_text(encoding="utf-8")):
            cells = row.split(" | ")
            stored.setdefault((cells[0], cells[1], len(cells)), set()).add(row)
    stale = []
    for doc in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        if doc.name == "report.md":
            continue
        for k, row in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if not (row.startswith("| ") and row.count(" | ") >= 2):
                continue
            cells = row.split(" | ")
            same = stored.get((cells[0], cells[1], len(cells)))
            if same and row not in same:
                stale.append(f"{doc.relative_to(ROOT)}:{k}: {row[:100]}")
    assert not stale, "quoted rows that their run folder no longer renders:\n" + \
        "\n".join(stale)
