"""A log file followed while something writes it: each new whole line goes to a
callback (``abbench build`` prints a build's log as it is written)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def follow(path: Path, echo: Callable[[str], None] | None, *,
           period: float = 0.2) -> Iterator[None]:
    """While the block runs, call ``echo`` with each line appended to ``path`` (from its
    size when the block starts); at the end, the lines not yet echoed. ``echo`` None:
    nothing is followed."""
    if echo is None:
        yield
        return
    done = threading.Event()
    try:
        start = path.stat().st_size
    except OSError:
        start = 0
    pos = [start]
    rest = [b""]

    def drain(final: bool) -> None:
        try:
            with open(path, "rb") as f:
                f.seek(pos[0])
                data = f.read()
        except OSError:
            return
        pos[0] += len(data)
        *lines, rest[0] = (rest[0] + data).split(b"\n")
        if final and rest[0]:
            lines.append(rest[0])
            rest[0] = b""
        for line in lines:
            echo(line.decode("utf-8", "replace"))

    def loop() -> None:
        while not done.wait(period):
            drain(False)

    thread = threading.Thread(target=loop, name=f"follow {path.name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        drain(True)
