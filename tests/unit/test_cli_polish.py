"""The command line a newcomer meets: --version, -h, whole command descriptions,
help text on every option, a results folder that is not there, a metric name
that no run has."""

from __future__ import annotations

import shutil
from pathlib import Path

import click
import typer

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


def test_every_option_has_help() -> None:
    def walk(cmd: click.Command, path: str) -> list[str]:
        missing = [f"{path} {'/'.join(p.opts)}" for p in cmd.params
                   if isinstance(p, click.Option) and not p.help]
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                missing += walk(sub, f"{path} {name}")
        return missing

    assert walk(typer.main.get_command(app), "abbench") == []


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
