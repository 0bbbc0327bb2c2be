"""What a server leaves in /dev/shm when it is killed mid-shutdown: found by inode
(what its group mapped or held before the stop) and removed once no one uses it."""

from __future__ import annotations

import contextlib
import os

#: names that servers' Python multiprocessing and SGLang leave in /dev/shm when killed
SHM_PATTERNS = ("psm_", "sem.mp-", "sglang_loads_")


def _group_pids(pgid: int) -> list[str]:
    """The processes of group ``pgid`` (from /proc/PID/stat, zombies included)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError), open(
                f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
            if int(f.read().rsplit(")", 1)[1].split()[2]) == pgid:
                out.append(pid)
    return out


def shm_inodes(pids: list[str] | None = None, shm_dir: str = "/dev/shm") -> set[int]:
    """Inodes of the files in ``shm_dir`` that these processes (every process: None)
    map or hold open. By inode, not name: a named semaphore is mapped under the
    temporary name glibc made it with ("/dev/shm/sem.XXXXXX (deleted)"), never under
    its own ``sem.mp-*`` name."""
    try:
        dev = os.stat(shm_dir).st_dev
    except OSError:
        return set()
    prefix = shm_dir.rstrip("/") + "/"
    used: set[int] = set()
    for pid in pids if pids is not None else os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", encoding="utf-8",
                                                errors="replace") as f:
            for line in f:  # addr perms offset dev inode path
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith(prefix):
                    with contextlib.suppress(ValueError):
                        used.add(int(parts[4]))
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    if st.st_dev == dev:
                        used.add(st.st_ino)
    return used


def group_shm(pgid: int, shm_dir: str = "/dev/shm") -> set[int]:
    """What a server's process group maps or holds open in ``shm_dir`` (inodes): taken
    before the stop, it names what the group may leave behind."""
    return shm_inodes(_group_pids(pgid), shm_dir)


def remove_stale_shm(since: float, shm_dir: str = "/dev/shm", *,
                     owned: set[int] | None = None) -> list[str]:
    """Remove the files a dead server left in ``shm_dir``: named like Python's or
    SGLang's segments, ours (owner), written after ``since`` (the server's start),
    among ``owned`` (what its group mapped or held before the stop; None: any), and
    mapped or held open by no live process. Returns their names and sizes."""
    try:
        names = [n for n in os.listdir(shm_dir) if n.startswith(SHM_PATTERNS)]
    except OSError:
        return []
    if not names or owned == set():
        return []
    used = shm_inodes(None, shm_dir)
    removed = []
    for n in sorted(names):
        path = os.path.join(shm_dir, n)
        try:
            st = os.lstat(path)
            if (st.st_uid != os.getuid() or st.st_mtime < since - 1.0 or st.st_ino in used
                    or (owned is not None and st.st_ino not in owned)
                    or not os.path.isfile(path)):
                continue
            os.unlink(path)
            removed.append(f"{n} ({st.st_size // 1024} KiB)")
        except OSError:
            continue
    return removed
