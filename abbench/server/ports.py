"""Ports for server lives: a free one below the ephemeral range (where no client's
outgoing connection takes it meanwhile), and whether one is taken."""

from __future__ import annotations

import random
import socket

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
