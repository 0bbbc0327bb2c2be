"""Every repository path that README, docs/ and scripts/ name exists (a renamed module or
test must take its mentions along), and so does every relative markdown link."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted(p for p in (ROOT / "scripts").iterdir() if p.is_file())]
PATH = re.compile(r"(?<![\w./$-])((?:abbench|tests|docs|scripts|benchmarks|arms)/[\w./-]*[\w/])")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
#: paths of other repositories that a file names on purpose
ELSEWHERE = {("scripts/llama-git-repo.sh", "docs/build.md")}  # llama.cpp's own docs


def test_named_paths_exist() -> None:
    missing = []
    for f in FILES:
        name = str(f.relative_to(ROOT))
        for m in PATH.finditer(f.read_text(errors="replace")):
            path = m.group(1).rstrip(".")
            if any(c in path for c in "*{}<>") or (name, path) in ELSEWHERE:
                continue
            if not (ROOT / path).exists():
                missing.append(f"{name}: {path}")
    assert not missing, "paths named but missing:\n" + "\n".join(missing)


def test_relative_links_exist() -> None:
    missing = []
    for f in FILES:
        if f.suffix != ".md":
            continue
        for m in LINK.finditer(f.read_text(errors="replace")):
            target = m.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (f.parent / target).exists():
                missing.append(f"{f.relative_to(ROOT)}: {target}")
    assert not missing, "links to missing files:\n" + "\n".join(missing)


def test_the_check_sees_a_missing_path(tmp_path: Path) -> None:
    text = "see `tests/unit/test_nothing_here.py` and abbench/report/table.py"
    found = [m.group(1) for m in PATH.finditer(text)]
    assert found == ["tests/unit/test_nothing_here.py", "abbench/report/table.py"]
    assert not (ROOT / found[0]).exists() and (ROOT / found[1]).exists()
