"""The bad-input corpus: every file in tests/bad_arms/ is refused by `abbench
validate` and by `abbench run` with exit 2, the file, the line or field, a hint,
and no process started, within 5 s and in less than 2 KB (tests/bad_arms/README.md
has the format)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abbench.cli import app
from abbench.config import infer
from tests.faultkit import cli
from tests.unit.test_docs import _anchors

CORPUS = Path(__file__).resolve().parents[1] / "bad_arms"
FILES = sorted(CORPUS.glob("*.yaml"), key=lambda p: int(p.name.split("-")[0]))


def test_the_corpus_is_large_enough() -> None:
    assert len(FILES) >= 84  # twice the 42 it had before the input caps


def _lines(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8", "replace").rstrip("\n").splitlines()


def _expected(path: Path, folder: Path) -> str:
    last = _lines(path)[-1]
    assert last.startswith("# expect: "), path
    return last.removeprefix("# expect: ").replace("{dir}", str(folder))


def _materialize(path: Path, tmp_path: Path) -> Path:
    """The folder a case runs in: the corpus itself, or (for a case with ``# make:``
    lines) a copy in which what git cannot hold is made: a FIFO, a link, a symlink
    loop, a directory, a file grown past a size cap, a UTF-16 copy."""
    makes = [ln.removeprefix("# make: ").split() for ln in _lines(path)
             if ln.startswith("# make: ")]
    if not makes:
        return CORPUS
    folder = tmp_path / "case"
    shutil.copytree(CORPUS, folder, symlinks=True)
    for verb, target, *args in makes:
        p = folder / target.replace("{self}", path.name)
        if verb == "grow":  # append text (comment lines to a YAML file) up to a size
            line = b"# padding to test the size cap\n" if p.exists() else b"filler words\n"
            with open(p, "ab") as f:
                f.write(line * (int(args[0]) // len(line) + 1))
            continue
        if verb == "utf16":
            p.write_bytes(p.read_text().encode("utf-16"))
            continue
        if p.exists() or p.is_symlink():
            p.unlink()
        if verb == "fifo":
            os.mkfifo(p)
        elif verb == "link":
            p.symlink_to(args[0])
        elif verb == "loop":
            p.symlink_to(p.name)
        elif verb == "dir":
            p.mkdir()
            (p / "arms.yaml").write_text("rounds: 1\n")
        else:
            raise AssertionError(f"{path.name}: unknown make verb {verb!r}")
    return folder


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_bad_arms_file_is_refused(path: Path, command: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # In-process (typer's runner) for speed: the marker file and the results folder
    # would still show any process started or any run begun.
    folder = _materialize(path, tmp_path)
    mark = tmp_path / "started"
    results = tmp_path / "results"
    args = [command, path.name] + (["--results", str(results), "--plain"]
                                   if command == "run" else [])
    monkeypatch.chdir(folder)
    monkeypatch.setenv("ABF_PY", sys.executable)
    monkeypatch.setenv("ABF_MARK", str(mark))
    p = CliRunner().invoke(app, args)
    if command == "validate" and "# validate: warning" in _lines(path):
        # validate may run on another machine than the servers: a warning there
        assert p.exit_code == 0, (p.stdout, p.stderr, p.exception)
        assert f"warning: {path.name}: {_expected(path, folder)} here" in p.stdout
        assert not mark.exists(), "a start command ran"
        return
    assert p.exit_code == 2, (p.stdout, p.stderr, p.exception)
    first, *rest = p.stderr.splitlines()
    assert first == f"Error: {path.name}: {_expected(path, folder)}"
    assert rest and rest[0].startswith("hint: ") and len(rest[0]) > 10
    assert "Traceback" not in p.stderr
    assert len(p.stderr.encode()) < 2048, len(p.stderr.encode())
    assert not mark.exists(), "a start command ran"
    assert not results.exists(), "the run got as far as the results directory"


def test_program_not_on_path_is_a_warning_for_validate_and_an_error_for_run(
        tmp_path: Path) -> None:
    """validate may run on another machine than the servers: a bare program name
    that is not on PATH here is only a warning there; run refuses it."""
    arms = tmp_path / "arms.yaml"
    arms.write_text(
        "defaults: {preset: llama.cpp}\n"
        "arms:\n"
        "  - {name: a, start: [no-such-server-abf, --port, '{port}']}\n"
        f"  - {{name: b, start: ['{sys.executable}', -c, pass, '{{port}}']}}\n"
        "workloads: [{contexts: [64], decode_tokens: 8}]\n")
    p = cli("validate", arms)
    assert p.returncode == 0
    assert "warning: " in p.stdout
    assert "program 'no-such-server-abf' is not on PATH here" in p.stdout
    p = cli("run", arms, "--results", tmp_path / "results")
    assert p.returncode == 2
    assert p.stderr.splitlines()[0] == (f"Error: {arms}: arms[0] (a).start[0]: program "
                                        "'no-such-server-abf' is not on PATH")
    assert "hint: install it" in p.stderr
    assert not (tmp_path / "results").exists()


#: a document a hint names: README.md or docs/NAME.md, with its section's anchor
DOC_REF = re.compile(r"(README\.md|docs/[\w.-]+\.md)(?:#([\w-]+))?")


def test_every_hint_names_a_document_and_section_that_exist(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The hints of the corpus point at the document that describes the field (README's
    'The arms file' for an arm's fields, docs/quality.md for quality:, ...), by a heading
    that is there; so does every entry of the map they are drawn from."""
    monkeypatch.chdir(CORPUS)
    monkeypatch.setenv("ABF_PY", sys.executable)
    monkeypatch.setenv("ABF_MARK", str(CORPUS / "never-started"))
    named: dict[str, str] = {}
    for path in FILES:
        if "# make: " not in path.read_text(errors="replace"):
            p = CliRunner().invoke(app, ["validate", path.name])
            for line in p.stderr.splitlines():
                for m in DOC_REF.finditer(line if line.startswith("hint: ") else ""):
                    named.setdefault(m.group(0), path.name)
    assert {"README.md#the-arms-file", "docs/quality.md",
            "docs/collectors-and-presets.md"} <= set(named), named
    assert named["README.md#the-arms-file"] == "06-unknown-top-key.yaml"  # did you mean
    assert infer.doc_of(("stats", "noise_band")) == "docs/statistics.md"
    assert infer.doc_of(("workloads", 1, "sessions", "turns")) == \
        "docs/traffic.md#multi-turn-sessions"
    mapped = {infer.README_ARMS, infer.README_REFUSED, *infer._DOCS.values(),
              *infer._WORKLOAD_DOCS.values(), infer.doc_of(("arms", 0, "preset_fields"))}
    for ref in {*named, *mapped}:
        file, _, anchor = ref.partition("#")
        assert (CORPUS.parents[1] / file).is_file(), (named.get(ref), ref)
        assert not anchor or anchor in _anchors(CORPUS.parents[1] / file), (named.get(ref), ref)
