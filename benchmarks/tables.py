"""What every benchmark's table says about where it ran, and how it is kept."""

from __future__ import annotations

import datetime as dt
import os
import platform
from pathlib import Path

from abbench.campaign.environment import cpu_model


def machine() -> str:
    """Today, the CPU, its cores and Python: the start of a table's first line."""
    return (f"{dt.date.today()}, {cpu_model()}, {os.cpu_count()} cores "
            f"(Python {platform.python_version()})")


def emit(text: str, out: Path | None) -> int:
    """Print the table and keep it in ``out`` (a file under docs/); exit status 0."""
    print(text)
    if out:
        out.write_text(text)
    return 0
