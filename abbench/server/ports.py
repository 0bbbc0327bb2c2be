"""Ports for server lives: a free one below the ephemeral range (where no client's
outgoing connection takes it meanwhile), whether one is taken, and by whom."""

from __future__ import annotations

import os
import random
import re
import socket

from abbench.server.tree import life_of

#: what servers print when their port is taken (Python's OSError, llama-server, uvicorn)
_BIND_FAILED = re.compile(r"address already in use|EADDRINUSE|couldn't bind|could not bind",
                          re.IGNORECASE)

#: ``port: auto`` ports start here: below, SGLang picks its own rendezvous port
#: (22000-29999, srt/utils/network.py get_free_port_below_ephemeral)
AUTO_PORT_LOW = 30000


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The first port of the kernel's ephemeral range (what bind(0) and connect() use)."""
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str, *, attempts: int = 64) -> int:
    """A free port for ``port: auto``, below the kernel's ephemeral range. A port from
    bind(0) is ephemeral, and between abbench's check and the server's bind the
    server's own processes draw ephemeral ports too (torch's gloo listeners, every
    connect()): SGLang 0.5.23 on CPU had its scheduler take the HTTP port that way, and
    its HTTP server failed with "address already in use" while abbench waited for
    /health. Ports between :data:`AUTO_PORT_LOW` and the ephemeral range are handed out
    by no one else; bind(0) only when that range is too narrow or full."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    top = ephemeral_low()
    low = AUTO_PORT_LOW if top - AUTO_PORT_LOW >= 256 else 10000
    if top - low >= attempts:
        for port in random.SystemRandom().sample(range(low, top), attempts):
            with socket.socket(family, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    """True when another process listens on (host, port).

    SO_REUSEADDR, as servers set it: a TIME_WAIT left by the previous round's server
    on a fixed port is no conflict, a live listener is.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def bind_failed(log: str) -> bool:
    """Whether a server's log says it could not bind its port (taken by another)."""
    return _BIND_FAILED.search(log) is not None


#: how much earlier than our server a process may start and still be taken for one of
#: its own (psutil's start times tick at 1/100 s)
START_SLACK_S = 0.1


def start_time(pid: int) -> float | None:
    """When ``pid`` started, on psutil's clock: it counts from the boot time in whole
    seconds, so it can read up to a second before time.time() at the same instant.
    Start times are compared on this clock only (a child that cleared its environment
    read as an older stray against the wall clock, on a machine whose boot time had a
    large fraction). None when the process is gone or the system does not tell."""
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:
        return None


def foreign_listener(port: int, since: float, own_pgid: int,
                     own: set[int] | None = None, token: str | None = None) -> str | None:
    """Another process that listens on ``port`` and started before our server did (a
    stray server that took the port first; ``since``: our server's :func:`start_time`),
    or belongs to another server life (carries
    another life's token, whenever it started: a concurrent run's server that bound the
    port while ours was still loading), described; None when the port is held by the
    server's own process group or life (``own``: its setsid children too), by
    something it started (docker-proxy, say), or when the system does not tell."""
    try:
        import psutil

        conns = psutil.net_connections(kind="tcp")
    except Exception:  # AccessDenied on some systems, no psutil: cannot tell
        return None
    held = [c.pid for c in conns
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    pids = {p for p in held if p is not None}
    if not pids or len(pids) < len(set(held)):  # nobody, or someone we may not see
        return None
    strays = []
    for pid in pids:
        try:
            if pid in (own or set()) or os.getpgid(pid) == own_pgid:
                return None
            proc = psutil.Process(pid)
            other = life_of(pid)
            if proc.create_time() < since - START_SLACK_S or other not in (None, token):
                strays.append(f"pid {pid} ({proc.name()})")
        except (psutil.Error, OSError):
            continue
    return ", ".join(strays) or None
