"""The command line a newcomer meets: --version, -h, whole command descriptions,
help text on every option, a results folder that is not there, a metric name
that no run has."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from abbench.cli import app
from abbench.version import __version__
from tests.faultkit import cli

ROOT = Path(__file__).resolve().parents[2]


def test_version_and_short_help_option() -> None:
    p = cli("--version")
    assert (p.returncode, p.stdout) == (0, f"abbench {__version__}\n")
    p = cli("-h")
    assert p.returncode == 0 and "Commands:" in p.stdout
    assert "Check arms files and print the plan (arms, order with its seed, workloads); " \
        "start" in " ".join(p.stdout.split())  # whole, not cut at 45 characters
    assert cli("validate", "-h").returncode == 0


def _command_paths(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group under ``cmd`` (typer's own click: told apart by fields)."""
    paths = [path]
    for name, sub in getattr(cmd, "commands", {}).items():
        paths += _command_paths(sub, (*path, name))
    return paths


def _command(path: tuple[str, ...]) -> Any:
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return cmd


def test_every_option_and_argument_has_help() -> None:
    paths = _command_paths(typer.main.get_command(app))
    assert len(paths) >= 18  # the walk reaches every command
    missing = [f"abbench {' '.join(path)} {p.name}" for path in paths
               for p in _command(path).params
               if p.param_type_name in ("option", "argument") and not p.help
               and not getattr(p, "hidden", False)]
    assert missing == []


def test_a_results_folder_that_is_not_there_is_an_error(tmp_path: Path) -> None:
    for args in (["ls"], ["history"]):
        p = cli(*args, "--results", tmp_path / "nonexistent")
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stderr.startswith(f"Error: --results: no results folder {tmp_path}/nonexistent")


def test_an_unknown_metric_lists_the_stored_ones(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs" / "examples" / "h200-seed-run", tmp_path / "r" / "run")
    p = cli("history", "--results", tmp_path / "r", "--metric", "decode_tps")
    assert p.returncode == 2
    first, hint = p.stderr.splitlines()[:2]
    assert first == ("Error: --metric: no stored run has the metric 'decode_tps' (did you mean "
                     "'decode_tok_s'?)")
    assert hint.startswith("hint: stored metrics: ") and "decode_tok_s" in hint


def test_help_names_values_not_python_types() -> None:
    """Every command's -h, as a user sees it: each value named (ARMS_FILE..., DIR, N),
    no python type (typer's default ``<list[Path]>``, ``<int range>``, ``<str>``)."""
    runner = CliRunner()
    paths = _command_paths(typer.main.get_command(app))
    assert len(paths) >= 18
    for path in paths:
        r = runner.invoke(app, [*path, "-h"], terminal_width=200)
        assert r.exit_code == 0, (path, r.output)
        leaked = re.findall(r"list\[|Path\]|Optional|NoneType|<(?:int|float|str|path|bool)\b",
                            r.output)
        assert leaked == [], (path, leaked, r.output)
    validate = runner.invoke(app, ["validate", "-h"], terminal_width=200).output
    assert "Usage: abbench validate [OPTIONS] {ARMS_FILE}..." in validate.replace(
        "root ", "abbench ")
    assert "  ARMS_FILE...  one or more arms files" in validate
    assert "--results DIR " in runner.invoke(app, ["report", "-h"]).output
    # the command list holds each docstring's whole first paragraph
    top = " ".join(runner.invoke(app, ["-h"], terminal_width=100).output.split())
    assert "change points judged with each run's rounds; --check gates CI; --html writes " \
        "a site." in top


def test_compare_of_unlike_runs_says_what_differs_before_the_table() -> None:
    """A 32K-128K campaign against a 255K one with side calls and other flags: the
    warning comes first and names each difference, in markdown and, on stderr before the
    numbers, for the other formats."""
    examples = ROOT / "docs" / "examples"
    differ = ("the two sides did not measure the same thing (`h200-seed-run` against "
              "`h200-seed-255k-run`): contexts 32K, 64K, 128K against 255K; decode tokens 128 "
              "against 256; side calls none against 1 workload; start command of the second "
              "side: `--override-kv llama.context_length=int:524288 (was "
              "llama.context_length=int:262144)`, `-c 524288 (was 262144)`, `-np 2 (was 1)`. ")
    p = cli("compare", "h200-seed-run", "h200-seed-255k-run", "--results", examples)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("abbench compare: run `h200-seed-run` arm prod (baseline)")
    assert lines[2].replace("**", "").startswith(f"Warning: {differ}")
    assert lines[4].startswith("| | prod (KV f16) (h200-seed-run) |")
    c = cli("compare", "h200-seed-run", "h200-seed-255k-run", "--results", examples,
            "--format", "csv")
    assert c.returncode == 0 and c.stderr.splitlines()[0].startswith(f"warning: {differ}")


def test_history_workload_takes_a_row_as_the_table_labels_it(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs" / "examples" / "h200-seed-run", tmp_path / "r" / "run")
    p = cli("history", "--results", tmp_path / "r", "--workload", "Decode 32K TTFT")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3 and all(": decode 32K TTFT (ms) [" in ln for ln in lines), lines
    p = cli("history", "--results", tmp_path / "r", "--workload", "decode 32K (tok/s)")
    assert p.returncode == 0 and all(": decode 32K (tok/s) [" in ln
                                     for ln in p.stdout.splitlines()), p.stdout
    p = cli("history", "--results", tmp_path / "r", "--workload", "decoder 1K")
    assert p.returncode == 2
    error, hint = p.stderr.splitlines()[:2]
    assert error == "Error: --workload: no row 'decoder 1K'"
    assert hint.startswith("hint: name one as the table labels it") and \
        "'decode 32K (tok/s)'" in hint and "'peak VRAM (MiB)'" in hint
