"""The terminal boundary: stdout and stderr that replace what their encoding cannot
show (a Latin-1 terminal), print no known secret, and survive a reader that went away
(a closed pipe, a closed terminal)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import Any

from abbench.config.secrets import redact
from abbench.errors import printable

#: exit code when the reader of stdout went away (128 + SIGPIPE, as shell tools)
EXIT_PIPE = 141


class Guarded:
    """A text stream that drops what it can no longer write: a reader that closed the
    pipe (EPIPE) or a terminal that went away (EIO, after SIGHUP) ends the output, not
    the command; the run goes on to its end (or its interrupt) and keeps its files."""

    def __init__(self, stream: Any, *, plain: bool = False):
        self._stream = stream
        self.lost: int | None = None  # the errno that ended the output
        #: stdout: abbench writes no escape sequence there, so none passes
        self._plain = plain

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                shown = redact(text)  # no known secret reaches a terminal
                self._stream.write(printable(shown) if self._plain else shown)
                return len(text)
            except OSError as e:
                self._lose(e)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._stream.flush()
            except OSError as e:
                self._lose(e)

    def _lose(self, e: OSError) -> None:
        self.lost = e.errno or errno.EIO
        try:  # what the stream still buffers goes nowhere at exit, without a complaint
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_streams() -> tuple[Guarded, Guarded]:
    """stdout and stderr that replace what their encoding cannot show (a Latin-1
    terminal) and survive a closed pipe or terminal."""
    guarded = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, Guarded):
            guarded.append(stream)
            continue
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="replace")
        g = Guarded(stream, plain=name == "stdout")
        setattr(sys, name, g)
        guarded.append(g)
    return guarded[0], guarded[1]
