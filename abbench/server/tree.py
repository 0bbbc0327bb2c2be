"""Every process of one server life, found and stopped, whatever session it moved to.

A process group misses a child that calls ``setsid()`` (``server &`` wrappers,
daemon(3), double forks): the group kill, PR_SET_PDEATHSIG and the reaper's group
kill all pass it by. So each life gets a token in its environment
(``ABBENCH_LIFE=<token>``), inherited by every descendant that does not clear its
environment; :func:`life_pids` finds them all by the token, plus the live
descendants of the main process by parent links (a child that cleared its
environment while its parent lives). What clears its environment *and* leaves its
parent is found by the port it listens on (:func:`port_listeners`, used by the stop).
The same scan serves the reaper (abbench died) and the port-owner check (a child of
the arm's own server is no stray).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from collections.abc import Iterable

#: the environment variable that marks a server life's processes
LIFE_VAR = "ABBENCH_LIFE"


def new_token() -> str:
    """A token naming one server life (unique across abbench processes and lives)."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def marked(token: str, var: str = LIFE_VAR) -> set[int]:
    """Processes whose environment holds ``ABBENCH_LIFE=token`` (or ``var=token``;
    readable ones: ours), this one aside."""
    needle = f"{var}={token}".encode()
    found = set()
    me = os.getpid()
    for pid in _pids():
        if pid == me:
            continue
        with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
            if needle in f.read().split(b"\0"):
                found.add(pid)
    return found


def life_of(pid: int) -> str | None:
    """The life token in process ``pid``'s environment (None: none, or unreadable)."""
    prefix = f"{LIFE_VAR}=".encode()
    with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
        for item in f.read().split(b"\0"):
            if item.startswith(prefix):
                return item[len(prefix):].decode("ascii", "replace")
    return None


def _ppid(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError), open(
            f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        return int(f.read().rsplit(")", 1)[1].split()[1])
    return None


def descendants(root: int) -> set[int]:
    """The live descendants of ``root`` by parent links (zombies included)."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        pp = _ppid(pid)
        if pp is not None:
            children.setdefault(pp, []).append(pid)
    out: set[int] = set()
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def life_pids(token: str, root: int | None = None) -> set[int]:
    """Every process of the life: marked with ``token``, or below ``root``."""
    found = marked(token)
    if root is not None:
        found |= descendants(root)
    found.discard(os.getpid())
    return found


def signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    """Send ``sig`` to each of ``pids`` (gone or foreign ones are skipped)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def alive(pids: Iterable[int]) -> set[int]:
    """Those of ``pids`` still running (zombies are not: they only wait to be reaped)."""
    out = set()
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError), open(
                f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                out.add(pid)
    return out


def sessions(pids: Iterable[int]) -> set[int]:
    """The session ids of ``pids`` other than abbench's own."""
    own = os.getsid(0)
    out = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            sid = os.getsid(pid)
            if sid != own:
                out.add(sid)
    return out


def in_sessions(sids: set[int]) -> set[int]:
    """Processes of these sessions (what a setsid child started after it moved)."""
    if not sids:
        return set()
    out = set()
    me = os.getpid()
    for pid in _pids():
        with contextlib.suppress(OSError):
            if pid != me and os.getsid(pid) in sids:
                out.add(pid)
    return out


def port_listeners(port: int) -> set[int]:
    """Processes listening on TCP ``port`` (those the system lets us see)."""
    try:
        import psutil

        conns = psutil.net_connections(kind="tcp")
    except Exception:  # AccessDenied on some systems, no psutil: cannot tell
        return set()
    return {c.pid for c in conns if c.pid is not None and c.status == psutil.CONN_LISTEN
            and c.laddr and c.laddr.port == port}


def describe(pids: Iterable[int]) -> str:
    """``pid N (name)`` for each of ``pids``."""
    out = []
    for pid in sorted(pids):
        name = "?"
        with contextlib.suppress(OSError), open(f"/proc/{pid}/comm", encoding="utf-8",
                                                errors="replace") as f:
            name = f.read().strip()
        out.append(f"pid {pid} ({name})")
    return ", ".join(out)


#: addresses only this host can reach
LOOPBACK = ("127.", "::1", "::ffff:127.")


def exposed(pids: Iterable[int]) -> list[str]:
    """The non-loopback addresses these processes listen on (``0.0.0.0``, ``::``, a
    host's own address), each once: anyone who can reach them can send requests."""
    try:
        import psutil

        conns = psutil.net_connections(kind="tcp")
    except Exception:  # AccessDenied on some systems: cannot tell
        return []
    mine = set(pids)
    return sorted({c.laddr.ip for c in conns if c.pid in mine and c.laddr
                   and c.status == psutil.CONN_LISTEN and not c.laddr.ip.startswith(LOOPBACK)})
