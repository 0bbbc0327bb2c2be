"""A server's log, followed: its last lines (:func:`tail`) and a watch that sleeps until
the log is written (:class:`LogWatch`, inotify where the kernel has it), so readiness is
noticed when the server writes its ready line rather than at the next poll."""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import select
import time
from pathlib import Path


def tail(path: Path, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


#: after the server's log grew: poll this often ...
FAST_POLL_S = 0.01
#: ... for this long
FAST_FOR_S = 1.0
#: how often the log's size is looked at between polls where inotify is missing
LOG_CHECK_S = 0.002
_IN_MODIFY, _IN_NONBLOCK, _IN_CLOEXEC = 0x2, 0o4000, 0o2000000


def _inotify(path: Path) -> int | None:
    """A descriptor that turns readable when ``path`` is written (Linux inotify), or
    None where there is none (then the size is looked at every :data:`LOG_CHECK_S`)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = int(libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(path), _IN_MODIFY) < 0:
        os.close(fd)
        return None
    return fd


class LogWatch:
    """When to poll next: the server's log growing says something happened. The
    kernel wakes the wait when the log is written (inotify), so a ready line is
    noticed as soon as the scheduler runs abbench, with no polling of its size."""

    def __init__(self, path: Path):
        self.path = path
        self.size = self._size()
        self.grew_at = -math.inf
        self._fd = _inotify(path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except OSError:
            return 0

    def _wait(self, left: float) -> None:
        """Until the log is written or ``left`` seconds pass."""
        if self._fd is None:
            time.sleep(min(LOG_CHECK_S, left))
            return
        waiter = select.poll()
        waiter.register(self._fd, select.POLLIN)
        if waiter.poll(left * 1e3):
            with contextlib.suppress(BlockingIOError):
                while os.read(self._fd, 4096):  # the events say only "written": drop them
                    pass

    def nap(self, interval: float) -> None:
        """Sleep until the next poll: ``interval``, or :data:`FAST_POLL_S` within
        :data:`FAST_FOR_S` of the log's last growth; at once when it grows now."""
        now = time.perf_counter()
        fast = now - self.grew_at < FAST_FOR_S
        end = now + (min(interval, FAST_POLL_S) if fast else interval)
        while True:
            size = self._size()
            if size != self.size:
                self.size, self.grew_at = size, time.perf_counter()
                return
            left = end - time.perf_counter()
            if left <= 0:
                return
            self._wait(left)
