"""Watchdog for one server's process group: ``python -m abbench.server.reaper``.

abbench starts it before the server; the server's process, between fork and exec,
writes its process group id as the first line of the reaper's stdin, and abbench
keeps stdin open. A ``done`` line means the server was stopped normally. End of
input without it means abbench died (even by SIGKILL): the reaper then kills the
whole group, so no server outlives abbench. Given the life's token (the first
argument), it also kills every process that carries it or shares a session with one
(a child that called ``setsid()``: see :mod:`abbench.server.tree`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from abbench.server.tree import alive, in_sessions, life_pids, sessions, signal_all


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is abbench's to handle
    first = sys.stdin.buffer.readline()  # the server's pgid, once it is started
    try:
        pgid = int(first)
    except ValueError:
        return 0  # no server started (or abbench died before it did)
    data = sys.stdin.buffer.read()  # returns at EOF: abbench closed us or died
    if b"done" in data:
        return 0
    token = argv[1] if len(argv) > 1 else ""
    escaped = life_pids(token, pgid) if token else set()
    escaped |= in_sessions(sessions(escaped) - {pgid}) if escaped else set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGCONT)  # a stopped (SIGSTOP) server must see the TERM
        os.killpg(pgid, signal.SIGTERM)
    signal_all(escaped, signal.SIGCONT)
    signal_all(escaped, signal.SIGTERM)
    time.sleep(2.0)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    signal_all(alive(escaped), signal.SIGKILL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
