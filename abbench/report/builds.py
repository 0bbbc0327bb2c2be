"""``abbench builds ls`` as words: the build cache's entries as a markdown table."""

from __future__ import annotations

import time
from collections.abc import Sequence

from abbench.server.buildcache import BuildEntry


def render_builds(entries: Sequence[BuildEntry]) -> str:
    """A markdown table of entries, for ``abbench builds ls``."""
    def size(n: int) -> str:
        value = float(n)
        for unit in ("B", "KiB", "MiB"):
            if value < 1024:
                return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
            value /= 1024
        return f"{value:.1f} GiB"

    def when(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))

    rows = ["| source | ref | commit | size | created | last used | cache hits | state |",
            "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        rows.append(f"| {e.source} | {e.ref or '?'} | {e.sha[:12]} | {size(e.size_bytes)} | "
                    f"{when(e.created)} | {when(e.last_used)} | {e.hits} | "
                    f"{'complete' if e.complete else 'incomplete'} |")
    total = sum(e.size_bytes for e in entries)
    rows.append(f"\n{len(entries)} builds, {size(total)}")
    return "\n".join(rows)

