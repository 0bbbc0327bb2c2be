"""The bad-input corpus: every file in tests/bad_arms/ is refused by `abbench
validate` and by `abbench run` with exit 2, the file, the line or field, a hint,
and no process started."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abbench.cli import app
from tests.faultkit import cli

CORPUS = Path(__file__).resolve().parents[1] / "bad_arms"
FILES = sorted(CORPUS.glob("*.yaml"))


def test_the_corpus_is_large_enough() -> None:
    assert len(FILES) >= 25


def _expected(path: Path) -> str:
    last = path.read_text().rstrip("\n").splitlines()[-1]
    assert last.startswith("# expect: "), path
    return last.removeprefix("# expect: ").replace("{dir}", str(CORPUS))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_bad_arms_file_is_refused(path: Path, command: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # In-process (typer's runner) for speed: the marker file and the results folder
    # would still show any process started or any run begun.
    mark = tmp_path / "started"
    results = tmp_path / "results"
    args = [command, path.name] + (["--results", str(results), "--plain"]
                                   if command == "run" else [])
    monkeypatch.chdir(CORPUS)
    monkeypatch.setenv("ABF_PY", sys.executable)
    monkeypatch.setenv("ABF_MARK", str(mark))
    p = CliRunner().invoke(app, args)
    assert p.exit_code == 2, (p.stdout, p.stderr, p.exception)
    first, *rest = p.stderr.splitlines()
    assert first == f"Error: {path.name}: {_expected(path)}"
    assert rest and rest[0].startswith("hint: ") and len(rest[0]) > 10
    assert "Traceback" not in p.stderr
    assert not mark.exists(), "a start command ran"
    assert not results.exists(), "the run got as far as the results directory"


def test_program_not_on_path_is_a_warning_for_validate_and_an_error_for_run(
        tmp_path: Path) -> None:
    """validate may run on another machine than the servers: a bare program name
    that is not on PATH here is only a warning there; run refuses it."""
    arms = tmp_path / "arms.yaml"
    arms.write_text(
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
