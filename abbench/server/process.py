"""Server lifecycle: start an arm's server, wait until ready, stop it, always.

Each server runs in its own process group (session). Three layers make sure no
server outlives abbench:

1. :meth:`Server.stop` (SIGTERM to the group, SIGKILL after the grace period),
   called from ``finally`` blocks and from the signal handlers of the runner;
2. ``PR_SET_PDEATHSIG``: the kernel sends SIGKILL to the server's direct child
   when abbench dies, even by SIGKILL;
3. a reaper process per server (``python -m abbench.server.reaper``) holding a pipe
   from abbench, on which the server's own process writes its group id before it
   execs: when the pipe closes without a ``done`` line (abbench died, even right
   after the fork), it kills the whole group, grandchildren included;
4. a token in the server's environment (:mod:`abbench.server.tree`): the stop and the
   reaper also stop every process that carries it, or descends from the server, or
   shares a session with one of them, so a child that called ``setsid()`` (``server
   &``, daemon(3)) is stopped too; what cleared its environment and still listens on
   the life's port after the stop is killed and named in the log.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from abbench.config.arms import ResolvedArm
from abbench.config.secrets import redact, scrub, secret_values
from abbench.config.values import format_cpus
from abbench.errors import (
    AbbenchError,
    ConfigError,
    Interrupted,
    PortTaken,
    ServerError,
    StoreError,
)
from abbench.server.http import Transport, TransportError
from abbench.server.interrupts import shielded
from abbench.server.logwatch import LogWatch, tail
from abbench.server.ports import (
    START_SLACK_S,
    bind_failed,
    foreign_listener,
    free_port,
    port_in_use,
    start_time,
)
from abbench.server.shm import group_shm, remove_stale_shm, shm_inodes
from abbench.server.tree import (
    LIFE_VAR,
    alive,
    describe,
    exposed,
    in_sessions,
    life_of,
    life_pids,
    new_token,
    port_listeners,
    sessions,
    signal_all,
)

__all__ = ["Server", "group_shm", "remove_stale_shm", "shm_inodes", "start_ready",
           "start_server"]

#: starts of a ``port: auto`` life whose port another process took before its server
#: bound it, each on a port chosen again
PORT_TRIES = 3

_PR_SET_PDEATHSIG = 1


def _pdeathsig(parent: int, reaper_fd: int | None = None, *, cpus: list[int] | None = None,
               nice: int | None = None) -> Callable[[], None]:
    def set_it() -> None:  # runs in the child between fork and exec (after setsid)
        if reaper_fd is not None:
            # The child tells the reaper its group id itself, before it can run anything:
            # were abbench killed right after the fork, the reaper still knows what to kill.
            with contextlib.suppress(OSError):
                os.write(reaper_fd, f"{os.getpid()}\n".encode())
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except OSError:
            pass
        if os.getppid() != parent:  # abbench died before prctl: no signal will come
            os.kill(os.getpid(), signal.SIGKILL)
        # The arm's CPUs and niceness, inherited by every thread and child the server
        # makes. A failure raises: Popen then fails, and no server runs unpinned.
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if nice:
            os.nice(nice)
    return set_it




@dataclass
class Server:
    """A started server: its process group, address, log file and timing."""

    arm: ResolvedArm
    round: int
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes]
    reaper: subprocess.Popen[bytes] | None
    started_at: float
    started_wall: float = field(default_factory=time.time)
    #: the server's start on psutil's clock (:func:`~abbench.server.ports.start_time`):
    #: what other processes' start times are compared with
    started_clock: float = 0.0
    ready_at: float | None = None
    ready_noticed_lag: float | None = None
    stopped: bool = False
    #: /dev/shm inodes the group mapped or held when it became ready (a server that
    #: dies before its stop still has its leftovers named)
    shm_owned: set[int] = field(default_factory=set)
    #: the token in the life's environment (tree.LIFE_VAR) and the sessions its
    #: processes were seen in (a setsid child's session outlives its parent link)
    token: str = ""
    sessions: set[int] = field(default_factory=set)
    #: the non-loopback addresses the life listened on when it became ready
    exposed: list[str] = field(default_factory=list)
    _log_file: object = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return self.arm.host

    @property
    def base_url(self) -> str:
        host = f"[{self.arm.host}]" if ":" in self.arm.host else self.arm.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def where(self) -> str:
        return f"arm {self.arm.name}, round {self.round}"

    def alive(self, grace: float = 0.0) -> bool:
        """Whether the server's process runs; ``grace``: wait up to this long for it to
        exit first (a server killed under a request resets the connection as it is torn
        down, a moment before its process can be reaped)."""
        if grace <= 0:
            return self.proc.poll() is None
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            return True
        return False

    def log_tail(self, lines: int = 20) -> str:
        return redact(tail(self.log_path, lines))

    def wait_ready(self, should_stop: Callable[[], bool] = lambda: False) -> float:
        """Poll the readiness path until 200; return seconds from start to ready.

        The readiness path is the truth; the server's log says when to ask: every
        ``ready.interval`` while the log is quiet, at once when it grows (servers log
        as they finish loading) and every :data:`FAST_POLL_S` for
        :data:`FAST_FOR_S` after (docs/ready-bench.md)."""
        ready = self.arm.ready
        path = ready.path or "/health"
        deadline = self.started_at + ready.timeout
        poll = Transport(self.base_url, resend=False)  # each poll is its own retry
        watch = LogWatch(self.log_path)
        t_prev_ask: float | None = None
        try:
            while True:
                if should_stop():
                    raise Interrupted("interrupted while waiting for the server")
                code = self.proc.poll()
                if code is not None:
                    raise self._exited_early(code)
                t_ask = time.perf_counter()
                try:
                    r = poll.get(path, timeout=max(ready.interval * 20, 1.0), max_body=65536)
                    if r.status == 200:
                        now = time.perf_counter()  # before the check below, which takes ms
                        stray = foreign_listener(self.port, self.started_clock, self.proc.pid,
                                                 own=self.processes(), token=self.token)
                        if stray is not None:
                            raise PortTaken(
                                f"port {self.port} answered, but from {stray}, not from this "
                                "arm's server", where=self.where, log_tail=self.log_tail(),
                                hint="stop that process (a server left from another run?); "
                                     "abbench measures nothing it did not start")
                        self.ready_at = now
                        self.sessions |= sessions(self.processes())
                        self.exposed = exposed(self.processes() | {self.proc.pid})
                        self.shm_owned = group_shm(self.proc.pid)
                        # The server became ready after the previous (failed) poll was
                        # sent: an upper bound of how late we noticed.
                        self.ready_noticed_lag = now - (t_prev_ask or t_ask)
                        return now - self.started_at
                except TransportError:
                    pass
                t_prev_ask = t_ask
                if time.perf_counter() > deadline:
                    raise ServerError(
                        f"the server was not ready after {ready.timeout:g} s "
                        f"(GET {ready.path} never answered 200)", where=self.where,
                        log_tail=self.log_tail(),
                        hint="raise ready.timeout for slow starts (vLLM/SGLang compile for "
                             f"minutes), or check ready.path; log: {self.log_path}")
                watch.nap(ready.interval)
        finally:
            poll.close()
            watch.close()

    def processes(self) -> set[int]:
        """The life's processes now: marked with its token or below its main process."""
        return life_pids(self.token, self.proc.pid) if self.token else set()

    def _exited_early(self, code: int) -> ServerError:
        """The main process ended before ready; one that daemonized is said so, one
        whose port another process took (a listener outside the life, or the server's
        own "address already in use") is a :class:`PortTaken`."""
        left = alive(self.processes())
        holders = port_listeners(self.port) - left - {os.getpid()}
        if holders or bind_failed(tail(self.log_path, 40)):
            held = f" ({describe(holders)} listens on it)" if holders else ""
            return PortTaken(
                f"the server exited with code {code} before it was ready: port {self.port} "
                f"was taken{held}", where=self.where, log_tail=self.log_tail(),
                hint="stop the process that holds the port, or set port: auto so abbench "
                     "picks another")
        if left:
            return ServerError(
                f"the server's main process exited (code {code}) before it was ready, "
                f"leaving {describe(left)} running: it put itself in the background",
                where=self.where, log_tail=self.log_tail(),
                hint="abbench measures and stops only a server that stays in the "
                     "foreground: drop '&', --daemon or daemonize from the start command "
                     "(a wrapper script should exec the server or wait for it); abbench "
                     "stops what it left")
        return ServerError(
            f"the server exited with code {code} before it was ready",
            where=self.where, log_tail=self.log_tail(),
            hint=f"full log: {self.log_path}; run the start command by hand to see why")

    def responds(self, timeout: float) -> bool:
        """Whether the readiness path answers (any status) within ``timeout`` seconds."""
        with Transport(self.base_url, resend=False) as t:
            try:
                t.get(self.arm.ready.path or "/health", timeout=timeout, max_body=65536)
            except TransportError:
                return False
        return True

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL after the grace period. Idempotent.

        Shielded: a Ctrl-C cannot cut a stop short and leave the server running.
        """
        if self.stopped:
            return self.proc.returncode
        with shielded(raise_pending=False):
            return self._stop()

    def _stop(self) -> int | None:
        """SIGTERM the main process (SGLang and vLLM shut their children down from its
        handler), then the rest of the group once the main is gone; SIGKILL only what
        is left after ``stop_grace``. A server killed mid-shutdown leaks its /dev/shm
        segments: what the group mapped or held there before the stop, left behind and
        used by no live process, is removed afterwards and logged."""
        self.stopped = True
        try:
            pgid = self.proc.pid  # start_new_session: pgid == pid
            self.sessions |= sessions(self.processes())  # before the main's children move
            owned = self.shm_owned | group_shm(pgid)  # what it may leave in /dev/shm
            deadline = time.perf_counter() + self.arm.stop_grace
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGCONT)  # a SIGSTOPped server must see TERM
                os.kill(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=max(deadline - time.perf_counter(), 0.0))
            if self.proc.poll() is not None:
                # the main is gone (a wrapper shell, say): its children get the TERM too
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGTERM)
            _wait_group_empty(pgid, deadline)
            # Whatever is left of the group (children that ignored TERM) gets KILL.
            killed = False
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
                killed = True
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            _wait_group_empty(pgid, time.perf_counter() + 5.0)
            killed = self._stop_escaped() or killed
            removed = remove_stale_shm(self.started_wall, owned=owned)
            self._log(f"stopped: exit code {self.proc.returncode}"
                      + (f"; SIGKILL after stop_grace {self.arm.stop_grace:g} s" if killed
                         else ""))
            if removed:
                self._log(f"removed what the server left in /dev/shm: {', '.join(removed)}")
        finally:
            _release_reaper(self.reaper)
            if self._log_file is not None:
                with contextlib.suppress(OSError):
                    self._log_file.close()  # type: ignore[attr-defined]
            redact_file(self.log_path)  # what the server printed of a known secret
        return self.proc.returncode

    def _stop_escaped(self) -> bool:
        """TERM, then KILL after the grace, every process of the life outside the
        group (a setsid child, a double fork); then kill what still listens on the
        life's port and started after it (a child that also cleared its environment),
        naming it in the log. True when anything needed SIGKILL."""
        if not self.token:
            return False
        left = alive(self.processes() | in_sessions(self.sessions))
        if left:
            self._log(f"stopping processes that left the server's group: {describe(left)}")
            signal_all(left, signal.SIGCONT)
            signal_all(left, signal.SIGTERM)
            deadline = time.perf_counter() + self.arm.stop_grace
            while (left := alive(left)) and time.perf_counter() < deadline:
                time.sleep(0.05)
        killed = bool(left)
        # another life's server (this abbench's or another's) that took the port since
        # is not ours to kill: it carries its own token
        stray = {p for p in port_listeners(self.port) if p != os.getpid()
                 and life_of(p) in (None, self.token) and _started_after(p, self.started_clock)}
        if stray:
            self._log(f"killed {describe(stray)}: it listened on the life's port {self.port} "
                      "after the stop, outside the server's group and environment")
        left |= stray
        signal_all(left, signal.SIGKILL)
        end = time.perf_counter() + 5.0
        while alive(left) and time.perf_counter() < end:
            time.sleep(0.05)
        return killed or bool(stray)

    def _log(self, line: str) -> None:
        if self._log_file is None:
            return
        with contextlib.suppress(OSError, ValueError):
            # on a line of its own: the server's last output may lack its newline
            text = ("" if _ends_a_line(self.log_path) else "\n") + f"# abbench: {line}\n"
            self._log_file.write(text.encode())  # type: ignore[attr-defined]
            self._log_file.flush()  # type: ignore[attr-defined]


def redact_file(path: Path, limit: int = 256 * 1024 * 1024) -> None:
    """Rewrite a server log with every known secret as *** (in place: the log's own
    inode, so a link was refused before it was opened); skipped above ``limit``."""
    with contextlib.suppress(OSError):
        if path.stat().st_size > limit:
            return
        data = path.read_bytes()
        text = data.decode("utf-8", "surrogateescape")
        clean = redact(text)
        if clean != text:
            with open(path, "r+b") as f:
                f.write(clean.encode("utf-8", "surrogateescape"))
                f.truncate()


def _ends_a_line(path: Path) -> bool:
    """Whether the file is empty or ends with a newline."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return True
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except OSError:
        return True


def group_alive(pgid: int) -> bool:
    """True while any process (zombies of others included) is in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_group_empty(pgid: int, deadline: float) -> None:
    while group_alive(pgid) and time.perf_counter() < deadline:
        time.sleep(0.05)


def _started_after(pid: int, clock: float) -> bool:
    """Whether process ``pid`` is ours and started after ``clock`` (psutil's clock:
    :func:`~abbench.server.ports.start_time`)."""
    try:
        import psutil

        proc = psutil.Process(pid)
        return proc.uids().real == os.getuid() and \
            proc.create_time() >= clock - START_SLACK_S
    except Exception:
        return False


def start_server(arm: ResolvedArm, *, round_: int, log_path: Path, argv_for_port:
                 Callable[[int], list[str]], env_extra: dict[str, str] | None = None) -> Server:
    """Start ``arm``'s server for one round; the caller must ``stop()`` it."""
    if arm.port == "auto":
        port = free_port(arm.host)
    else:
        port = int(arm.port)
        if port_in_use(arm.host, port):
            raise ServerError(f"port {port} on {arm.host} is already in use by another process",
                              where=f"arm {arm.name}, round {round_}",
                              hint="stop that process, or set port: auto so abbench picks a "
                                   "free port")
    argv = argv_for_port(port)
    env = dict(os.environ)
    env.update(arm.env)
    env.update(ABBENCH_PORT=str(port), ABBENCH_HOST=arm.host, ABBENCH_ARM=arm.name,
               ABBENCH_ROUND=str(round_))
    if arm.cpus is not None:
        env["ABBENCH_CPUS"] = format_cpus(arm.cpus)
    if env_extra:
        env.update(env_extra)
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "ab")  # noqa: SIM115 - closed by Server.stop
        shown = scrub(" ".join(argv), secret_values(arm.env, os.environ))
        log_file.write(f"# abbench: {shown}\n".encode())
        log_file.flush()
    except OSError as e:
        raise StoreError(f"cannot write the server log: {e.strerror or e}", where=str(log_path),
                         hint="free disk space or fix permissions of the results directory, "
                              "then resume the run") from None
    # Shielded from here until the Server exists: an interrupt now would leave a
    # started server that no one stops (it then raises at the next stop-flag check).
    with shielded(raise_pending=False):
        return _spawn(arm, round_, port, argv, env, log_path, log_file)


def start_ready(arm: ResolvedArm, *, round_: int, log_path: Path,
                argv_for_port: Callable[[int], list[str]], should_stop: Callable[[], bool],
                say: Callable[[str], None], lives: list[Server],
                tries: int = PORT_TRIES) -> float:
    """Start ``arm``'s server and wait until it is ready; seconds from start to ready.

    With ``port: auto``, a port another process took between abbench choosing it and
    the server binding it (:class:`PortTaken`) is chosen again: at most ``tries``
    starts, each retry said through ``say`` and in the server's log. Every server
    started is appended to ``lives``; all but the last are stopped here, the caller
    stops the last (whether it became ready or not)."""
    ports: list[int] = []
    for attempt in range(1, tries + 1):
        server = start_server(arm, round_=round_, log_path=log_path,
                              argv_for_port=argv_for_port)
        lives.append(server)
        ports.append(server.port)
        try:
            return server.wait_ready(should_stop)
        except PortTaken as e:
            if arm.port != "auto":
                raise
            if attempt == tries:
                raise PortTaken(f"{e.message} (port: auto; {tries} starts, on ports "
                                f"{', '.join(map(str, ports))}, each found its port taken)",
                                where=e.where, hint=e.hint, log_tail=e.log_tail) from None
            line = (f"port {server.port} was taken before the server bound it: {e.message}; "
                    f"starting again on another port (start {attempt + 1} of {tries})")
            server._log(line)
            server.stop()
            say(f"  {arm.name} round {round_}: {line}")
    raise AssertionError("unreachable: the last start returns or raises")


def _spawn(arm: ResolvedArm, round_: int, port: int, argv: list[str], env: dict[str, str],
           log_path: Path, log_file: BinaryIO) -> Server:
    # The reaper starts first; the server's child process writes its group id to the
    # reaper before exec: there is no moment in which the server runs without a watchdog.
    token = new_token()
    env = {**env, LIFE_VAR: token}
    reaper = _start_reaper(token)
    reaper_fd = reaper.stdin.fileno() if reaper is not None and reaper.stdin else None
    try:
        proc = subprocess.Popen(
            argv, cwd=arm.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_pdeathsig(os.getpid(), reaper_fd, cpus=arm.cpus, nice=arm.nice),
        )
    except OSError as e:
        _release_reaper(reaper)
        log_file.close()
        raise _popen_error(e, arm, round_, argv) from None
    except subprocess.SubprocessError:  # the preexec function raised: cpus or nice
        _release_reaper(reaper)
        log_file.close()
        asked = [f"pin it to cpus {format_cpus(arm.cpus)}"] if arm.cpus is not None else []
        asked += [f"set nice {arm.nice}"] if arm.nice else []
        raise ServerError(f"could not start the server: could not {' or '.join(asked)}",
                          where=f"arm {arm.name}, round {round_}",
                          hint="name CPUs abbench may use (see taskset -p $$), and a nice "
                               "value of 0 or more unless abbench runs as root") from None
    started = time.perf_counter()
    clock = start_time(proc.pid)  # psutil's clock reads up to a second early: see there
    return Server(arm=arm, round=round_, port=port, log_path=log_path, proc=proc, reaper=reaper,
                  started_at=started, token=token, _log_file=log_file,
                  started_clock=time.time() - 1.0 if clock is None else clock)


def _popen_error(e: OSError, arm: ResolvedArm, round_: int, argv: list[str]) -> AbbenchError:
    if isinstance(e, FileNotFoundError):
        return ConfigError(f"program {argv[0]!r} not found", where=f"arm {arm.name}: start[0]",
                           hint="install it or give its full path")
    if isinstance(e, PermissionError):
        return ConfigError(f"program {argv[0]!r} is not executable",
                           where=f"arm {arm.name}: start[0]",
                           hint=f"chmod +x {argv[0]}, or fix the path")
    return ServerError(f"could not start {argv[0]!r}: {e}", where=f"arm {arm.name}, "
                       f"round {round_}")


def _start_reaper(token: str) -> subprocess.Popen[bytes] | None:
    """``python -m abbench.server.reaper TOKEN``; its first input line will be the
    server's pgid."""
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "abbench.server.reaper", token], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
    except OSError:
        return None


def _release_reaper(reaper: subprocess.Popen[bytes] | None) -> None:
    """Tell a reaper its server is gone (or never started) and let it exit."""
    if reaper is None:
        return
    with contextlib.suppress(OSError, ValueError):
        assert reaper.stdin is not None
        reaper.stdin.write(b"done\n")
        reaper.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        reaper.wait(timeout=5)

