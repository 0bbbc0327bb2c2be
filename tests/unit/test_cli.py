"""The CLI against the reference server (tests/refserver.py), whose rates are known."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def abbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "abbench.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_help_shows_examples():
    for cmd in ("run", "validate"):
        r = abbench(cmd, "--help")
        assert r.returncode == 0 and "Example: abbench " + cmd in r.stdout
