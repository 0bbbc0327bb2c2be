"""SIGINT, SIGTERM and SIGHUP during a run: stop cleanly, lose nothing.

:func:`handle_signals` installs a handler that sets the run's stop flag and raises
:class:`~abbench.errors.Interrupted` in the main thread, so ``finally`` blocks stop
the server in hand and the samples already appended stay on disk.

Some sections must not be cut short by that exception: stopping a server (a
half-done stop could leave it running) and appending a sample (a half-written
line). Inside :func:`shielded` the handler only notes the signal; the exception is
raised when the section ends (``raise_pending=True``), or left for the next
shielded section or stop-flag check (``raise_pending=False``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from abbench.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _State(threading.local):
    depth = 0


_state = _State()
_pending: list[str] = []  # names of signals noted inside a shielded section


@contextlib.contextmanager
def shielded(*, raise_pending: bool) -> Iterator[None]:
    """A section that an interrupt must not cut short (see the module docstring)."""
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
    if raise_pending and _state.depth == 0 and _pending and \
            threading.current_thread() is threading.main_thread():
        name = _pending.pop()
        _pending.clear()
        raise Interrupted(f"stopped by {name}")


@contextlib.contextmanager
def handle_signals(stop_event: threading.Event) -> Iterator[None]:
    """Turn SIGINT/SIGTERM/SIGHUP into the stop flag plus one Interrupted (main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if stop_event.is_set():
            return  # already stopping: let the clean-up finish
        stop_event.set()
        name = signal.Signals(signum).name
        if _state.depth > 0:
            _pending.append(name)
            return
        raise Interrupted(f"stopped by {name}")

    _pending.clear()
    old = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        _pending.clear()
