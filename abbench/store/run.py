"""Runs on disk: ``results/<run-id>/``.

- ``run.json``: id, status, arms, order, seed, schedule, environment (atomic writes);
- ``config.yaml``: the resolved config, secrets redacted;
- ``samples.jsonl``: one JSON line per measurement, appended and flushed the moment
  it is measured (a crash loses nothing already written);
- ``logs/<arm>-r<round>.log``: each server life's stdout and stderr;
- ``report.md`` / ``report.json``: the rendered report (atomic writes).

Every record carries ``schema`` (:data:`SCHEMA_VERSION`). Records are the typed
models of :mod:`abbench.model.records`: parsed here as they are read, and written
from them (:func:`record_line`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import fcntl
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from abbench.config.secrets import redact
from abbench.errors import StoreError
from abbench.model.records import Record, RecordError, parse_record
from abbench.model.runmeta import MetaError, RunMeta, UntilCiState, parse_meta
from abbench.server.interrupts import shielded
from abbench.server.tree import alive

SCHEMA_VERSION = 1
RUN_FILE = "run.json"
SAMPLES_FILE = "samples.jsonl"
#: the length run.json's status line is padded to: any status fits in place
_STATUS_LINE = 32
#: held (flock) by the one abbench that writes the run; holds its pid
WRITER_LOCK = ".writer.lock"
#: the lock files this process holds, kept open until it exits
_HELD: dict[Path, int] = {}
_PID_FIELD = 24  # the holder's pid, padded: written in one pwrite, never truncated first


def _holder(fd: int, wait_s: float = 2.0) -> str:
    """The pid of the process holding the writer lock, as it wrote it. The holder
    writes it just after taking the lock, so a live pid is waited for briefly; a pid
    left by a holder that died (SIGKILL, before its release wiped it) is not taken for
    the live one."""
    deadline = time.monotonic() + wait_s
    while True:
        text = os.pread(fd, _PID_FIELD, 0).decode("ascii", "replace").strip()
        if text.isdigit() and alive([int(text)]):
            return text
        if time.monotonic() >= deadline:
            return "?"
        time.sleep(0.01)


def atomic_write(path: Path, text: str) -> None:
    """Write, fsync, rename: readers see the old file or the new one, never half.

    A full disk or a read-only directory is a :class:`StoreError` naming the file.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        raise _write_error(path, e) from None
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 ignores the umask
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(redact(text))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _write_error(path, e) from None
        raise


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask (read by setting it and setting it back, under a lock)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _write_error(path: Path, e: OSError) -> StoreError:
    return StoreError(f"cannot write {path.name}: {e.strerror or e}", where=str(path),
                      hint="free disk space or fix the permissions; nothing already "
                           "written was changed")


def new_run_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now()
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def check_writable(results: Path, need_bytes: int = 10 * 1024 * 1024) -> None:
    """Fail before any server starts when results cannot be written."""
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the results directory: {e.strerror}",
                         where=str(results), hint="pass --results DIR with a writable "
                         "directory") from None
    if not os.access(results, os.W_OK | os.X_OK):
        raise StoreError("the results directory is not writable", where=str(results),
                         hint="fix its permissions or pass --results DIR") from None
    try:
        free = shutil.disk_usage(results).free
    except OSError:
        free = need_bytes
    if free < need_bytes:
        raise StoreError(f"only {free // 1024} KiB free on the results disk", where=str(results),
                         hint="free some space or pass --results DIR on another disk")
    try:
        with tempfile.NamedTemporaryFile(dir=results, prefix=".probe-"):
            pass
    except OSError as e:
        raise StoreError(f"cannot write into the results directory: {e.strerror}",
                         where=str(results), hint="pass --results DIR with a writable "
                         "directory") from None


@dataclass
class _ReadCache:
    """What :meth:`Run.records` has parsed so far: the whole lines up to ``offset``."""

    file: tuple[int, int] = (0, 0)  # (st_dev, st_ino) of the file read
    offset: int = 0
    lines: int = 0
    last: bytes = b""  # the last whole line read, to notice a file rewritten in place
    records: list[Record] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def holds(self, f: BinaryIO) -> bool:
        """Whether ``f`` is the file read so far, grown by appends only."""
        st = os.fstat(f.fileno())
        if (st.st_dev, st.st_ino) != self.file or st.st_size < self.offset:
            return False
        f.seek(self.offset - len(self.last))
        return f.read(len(self.last)) == self.last


@dataclass
class Run:
    """An open run folder, for writing (the runner) or reading (reports)."""

    path: Path
    _read: _ReadCache = field(default_factory=_ReadCache, init=False, repr=False,
                              compare=False)
    _read_lock: threading.Lock = field(default_factory=threading.Lock, init=False,
                                       repr=False, compare=False)

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def samples_path(self) -> Path:
        return self.path / SAMPLES_FILE

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    def log_path(self, arm: str, round_: int) -> Path:
        return self.checked(self.logs_dir / f"{arm}-r{round_}.log")

    def checked(self, path: Path) -> Path:
        """``path`` (inside the run folder), refused when it or a folder on the way is a
        link: abbench writes nothing through a link out of the results folder."""
        rel = path.relative_to(self.path)
        for depth in range(1, len(rel.parts) + 1):
            p = self.path.joinpath(*rel.parts[:depth])
            if p.is_symlink():
                raise StoreError(f"{p.relative_to(self.path)} in the run folder is a link "
                                 f"(to {os.readlink(p)}); abbench writes only inside the "
                                 "results folder", where=str(p),
                                 hint="remove the link (keep what it points to, if you need "
                                      "it), then resume the run")
        return path

    # ------------------------------------------------------------ writing
    @classmethod
    def create(cls, results: Path, meta: dict[str, Any], config: dict[str, Any]) -> Run:
        check_writable(results)
        run_id = meta.get("id") or new_run_id()
        path = results / run_id
        try:
            path.mkdir(parents=True)
        except OSError as e:
            raise StoreError(f"cannot create the run folder: {e}", where=str(path)) from None
        run = cls(path)
        run.take_writer()
        run.logs_dir.mkdir()
        atomic_write(path / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        run.write_meta({**meta, "id": run_id, "schema": SCHEMA_VERSION})
        run.samples_path.touch()
        return run

    def take_writer(self) -> None:
        """Become the run's one writer: an exclusive lock on :data:`WRITER_LOCK`, held
        until this process exits (the kernel drops it even after SIGKILL). A second
        abbench (two ``run --resume`` at once) is refused, naming the holder's pid."""
        path = self.path / WRITER_LOCK
        if path in _HELD:
            return
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise _write_error(path, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd)
            os.close(fd)
            raise StoreError(f"run {self.id} is still running by pid {holder}",
                             where=str(self.path),
                             hint="wait for it, or stop it (Ctrl-C) and resume then; one "
                                  "abbench writes a run at a time") from None
        with contextlib.suppress(OSError):  # one write: never an empty file in between
            os.pwrite(fd, f"{os.getpid()}\n".ljust(_PID_FIELD).encode(), 0)
        _HELD[path] = fd

    def release_writer(self) -> None:
        """Drop the writer lock (the run is finished with); the pid is wiped first, so a
        later holder's pid is the only one another abbench can read."""
        fd = _HELD.pop(self.path / WRITER_LOCK, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.pwrite(fd, b" " * _PID_FIELD, 0)
            with contextlib.suppress(OSError):
                os.close(fd)

    def write_meta(self, meta: dict[str, Any]) -> None:
        """run.json, atomically; on a disk with no room for a new file (no free inode)
        its status is still changed in place, so a stopped run never reads "running"."""
        text = json.dumps(meta, indent=2, default=str) + "\n"
        # room on the status line for any status, for that in-place change
        text = re.sub(r'^(  "status": "[a-z]*",)$', lambda m: m.group(1).ljust(_STATUS_LINE),
                      text, count=1, flags=re.M)
        try:
            atomic_write(self.path / RUN_FILE, text)
        except StoreError:
            if not self._status_in_place(str(meta.get("status", ""))):
                raise

    def _status_in_place(self, status: str) -> bool:
        """Rewrite only the status line of run.json in place, within its length (no new
        inode, no new block). True when it was done."""
        path = self.path / RUN_FILE
        try:
            with open(path, "r+b") as f:
                old = f.read()
                m = re.search(rb'^  "status": "[a-z]*",( *)$', old, flags=re.M)
                new = f'  "status": {json.dumps(status)},'.encode()
                if m is None or len(new) > m.end() - m.start():
                    return False
                f.seek(m.start())
                f.write(new.ljust(m.end() - m.start()))
                f.flush()
                os.fsync(f.fileno())
            return True
        except OSError:
            return False

    def update_meta(self, **changes: Any) -> RunMeta:
        """Set top-level fields of run.json (JSON data); run.json as it is now, typed."""
        meta = self.meta()
        meta.update(changes)
        self.write_meta(meta)
        return parse_meta(meta)

    def append(self, record: Record) -> None:
        """Append one record and flush it to disk (fsync) before returning.

        One ``write`` of the whole line; when it fails (disk full) the file is cut
        back to its old end, so no half line is left for the next append to join.
        Shielded: an interrupt waits until the line is on disk.
        """
        self.append_many([record])

    def append_many(self, records: list[Record]) -> None:
        """Append records as one write and one fsync (a load level's requests): all of
        them are on disk when it returns, or none."""
        line = redact("".join(record_line(record) for record in records)).encode()
        with shielded(raise_pending=True):
            try:
                fd = os.open(self.checked(self.samples_path),
                             os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            except OSError as e:
                raise self._append_error(e) from None
            try:
                end = os.lseek(fd, 0, os.SEEK_END)
                try:
                    view = memoryview(line)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                except OSError as e:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, end)
                    raise self._append_error(e) from None
            finally:
                os.close(fd)

    def _append_error(self, e: OSError) -> StoreError:
        return StoreError(f"cannot append a sample: {e.strerror or e}",
                          where=str(self.samples_path),
                          hint="every sample before this one is kept; free disk space, then "
                               f"resume the run with abbench run --resume {self.id}")

    def repair_tail(self) -> str | None:
        """Cut a half-written last line (abbench killed mid-write); say what was cut."""
        try:
            with open(self.samples_path, "rb+") as f:
                data = f.read()
                if not data or data.endswith(b"\n"):
                    return None
                keep = data.rfind(b"\n") + 1
                f.truncate(keep)
                return (f"{self.samples_path}: cut a half-written last line "
                        f"({len(data) - keep} bytes)")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self._append_error(e) from None

    def write_text(self, name: str, text: str) -> None:
        atomic_write(self.path / name, text)

    # ------------------------------------------------------------ reading
    def meta(self) -> dict[str, Any]:
        """run.json as written (checked field by field: :meth:`info` types it)."""
        return self._read_meta()[0]

    def info(self) -> RunMeta:
        """run.json typed (:class:`RunMeta`), read and checked as :meth:`meta` is."""
        return self._read_meta()[1]

    def _read_meta(self) -> tuple[dict[str, Any], RunMeta]:
        path = self.path / RUN_FILE
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise _no_run_json(self.path) from None
        except IsADirectoryError:
            raise StoreError("run.json is a directory", where=str(path),
                             hint="move it away and put the run's run.json back") from None
        except json.JSONDecodeError as e:
            cut = e.doc.lstrip().startswith("{") and not e.doc.rstrip().endswith("}")
            raise StoreError(f"run.json is {'cut short' if cut else 'not valid JSON'} "
                             f"(line {e.lineno}, column {e.colno}: {e.msg})", where=str(path),
                             hint="a full disk or an editor may have cut it: restore it from "
                                  "a backup; samples.jsonl, which holds every measurement, is "
                                  "untouched") from None
        except (OSError, ValueError) as e:
            raise StoreError(f"run.json cannot be read: {e}", where=str(path)) from None
        if not isinstance(meta, dict):
            raise StoreError(f"run.json holds a JSON {type(meta).__name__}, not an object",
                             where=str(path), hint="restore the run's run.json from a backup")
        check_schema(meta.get("schema"), where=str(path))
        try:
            return meta, parse_meta(meta)
        except MetaError as e:
            raise StoreError("run.json has a field of the wrong type: "
                             + "; ".join(e.problems[:5])
                             + (f"; and {len(e.problems) - 5} more" if len(e.problems) > 5
                                else ""),
                             where=str(self.path / RUN_FILE),
                             hint="restore the field as abbench wrote it (or the whole "
                                  "run.json from a copy)") from None

    # ------------------------------------------------------------ typed updates
    def set_until_ci(self, state: UntilCiState,
                     schedule: list[tuple[int, int, str]] | None = None) -> None:
        """Record an --until-ci look (and the schedule it extended)."""
        changes: dict[str, Any] = {"until_ci": state.data()}
        if schedule is not None:
            changes["schedule"] = [list(s) for s in schedule]
        self.update_meta(**changes)

    def add_exposed(self, arm: str, addresses: list[str]) -> None:
        """Note the addresses beyond 127.0.0.1 an arm's server listened on."""
        seen = self.info().exposed
        both = sorted(set(seen.get(arm, [])) | set(addresses))
        if both != seen.get(arm):
            self.update_meta(exposed={**seen, arm: both})

    def describe_arm(self, arm: str, *, props: dict[str, Any] | None = None,
                     templates: dict[str, Any] | None = None) -> None:
        """What an arm's server said about itself (llama.cpp /props) and what each of its
        requests sends, by workload: once per arm, in one read and one write of
        run.json (each write is an fsync)."""
        meta, info = self._read_meta()
        if props is not None:
            meta["servers"] = {**info.servers, arm: props}
        if templates is not None:
            meta["request_templates"] = {**info.request_templates, arm: templates}
        self.write_meta(meta)

    def records(self, problems: list[str] | None = None) -> list[Record]:
        """Every record stored so far (as :func:`iter_records` reads them). The runner
        asks after every window, so whole lines are parsed once and kept; each call
        reads only what was appended since. A half-written last line is parsed each
        time and never kept; a file replaced or cut shorter is read again."""
        with self._read_lock:
            try:
                f = open(self.samples_path, "rb")  # noqa: SIM115
            except FileNotFoundError:
                self._read = _ReadCache()
                return []
            with f:
                c = self._read
                if not c.holds(f):
                    st = os.fstat(f.fileno())
                    c = self._read = _ReadCache(file=(st.st_dev, st.st_ino))
                f.seek(c.offset)
                data = f.read()
            whole = data.rfind(b"\n") + 1
            for line in data[:whole].split(b"\n")[:-1]:
                rec = _parse_line(self.samples_path, c.lines + 1, line, c.problems)
                c.lines += 1
                c.offset += len(line) + 1
                c.last = line + b"\n"
                if rec is not None:
                    c.records.append(rec)
            out = list(c.records)
            tail_problems: list[str] = []
            tail = _parse_line(self.samples_path, c.lines + 1, data[whole:], tail_problems)
            if tail is not None:
                out.append(tail)
            if problems is not None:
                problems.extend([*c.problems, *tail_problems])
            return out


def record_line(record: Record) -> str:
    """One line of a samples file: ``schema`` first, then the record's fields."""
    return json.dumps({"schema": SCHEMA_VERSION, **record.data()}, default=_json_default,
                      allow_nan=False) + "\n"


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def check_schema(version: Any, *, where: str) -> None:
    if version is None:
        raise StoreError("no schema version", where=where,
                         hint="this file was not written by abbench")
    if version != SCHEMA_VERSION:
        newer = isinstance(version, int) and version > SCHEMA_VERSION
        raise StoreError(
            f"schema version {version} is not readable by this abbench (reads {SCHEMA_VERSION})",
            where=where, hint="upgrade abbench" if newer else "re-run with this abbench")


def iter_records(path: Path, problems: list[str] | None = None) -> Iterator[Record]:
    """Records of a samples file. Truncated or corrupt lines are reported in
    ``problems`` (file and line) and skipped; the rest is kept. A line that is JSON of
    this schema but no record abbench can read (a field of the wrong type, a required
    one missing) is a :class:`StoreError` naming the file and line."""
    try:
        f = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return
    with f:
        for lineno, line in enumerate(f, 1):
            rec = _parse_line(path, lineno, line, problems)
            if rec is not None:
                yield rec


def _parse_line(path: Path, lineno: int, line: bytes,
                problems: list[str] | None) -> Record | None:
    """One line of a samples file as a record; None for a blank or skipped line."""
    if not line.strip():
        return None
    try:
        rec = json.loads(line.decode("utf-8", errors="replace"))
        if not isinstance(rec, dict):
            raise ValueError("not an object")
    except ValueError as e:
        if problems is not None:
            problems.append(f"{path}:{lineno}: skipped a corrupt line ({e})")
        return None
    if rec.get("schema") != SCHEMA_VERSION:
        if problems is not None:
            problems.append(f"{path}:{lineno}: skipped a record of schema "
                            f"{rec.get('schema')!r}")
        return None
    try:
        return parse_record(rec)
    except RecordError as e:
        raise StoreError(f"line {lineno} is not a record abbench can read: {e}",
                         where=str(path),
                         hint="the file was edited or written by another tool: fix "
                              "or delete that line (every other line is kept)") from None


def list_runs(results: Path) -> list[Run]:
    if not results.is_dir():
        return []
    return sorted((Run(p) for p in results.iterdir() if (p / RUN_FILE).is_file()),
                  key=lambda r: r.id)


def _no_run_json(folder: Path) -> StoreError:
    if (folder / SAMPLES_FILE).exists() or (folder / "config.yaml").exists():
        return StoreError("the run folder has no run.json (deleted or moved?)",
                          where=str(folder), hint="put its run.json back (from a backup); "
                          "samples.jsonl and config.yaml are kept; abbench needs run.json "
                          "to report or resume the run")
    return StoreError("not a run folder (no run.json)", where=str(folder),
                      hint="give a run id listed by abbench ls")


def _meta_field(run: Run, key: str) -> Any:
    """One field of a run's run.json, or None when it cannot be read."""
    try:
        meta = json.loads((run.path / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta.get(key) if isinstance(meta, dict) else None


def _started(run: Run) -> tuple[float, str]:
    """When a run started (run.json's created), for ``latest``; its folder name breaks
    ties and stands in for a date that cannot be read."""
    created = _meta_field(run, "created")
    try:
        ts = dt.datetime.fromisoformat(str(created)).timestamp()
    except ValueError:
        ts = float("-inf")
    return ts, run.id


def open_run(ref: str, results: Path) -> Run:
    """A run by id (or unique prefix: the folder name or the id in its run.json),
    ``latest`` (the newest by start time), or by its folder path."""
    p = Path(ref)
    if (p / RUN_FILE).is_file():
        return Run(p)
    cand = results / ref
    if (cand / RUN_FILE).is_file():
        return Run(cand)
    for folder in (p, cand):  # the folder is there, its run.json is not (a file)
        if (folder / RUN_FILE).exists():
            return Run(folder)  # reading it says what is wrong
        if folder.is_dir() and ((folder / SAMPLES_FILE).exists()
                                or (folder / "config.yaml").exists()):
            raise _no_run_json(folder)
    runs = list_runs(results)
    if ref == "latest" and runs:
        return max(runs, key=_started)
    ids = [r.id for r in runs]
    matches = [i for i in ids if i.startswith(ref)]
    if len(matches) == 1:
        return Run(results / matches[0])
    if not matches:  # the id run.json holds (and the report prints), in a renamed folder
        named = [r for r in runs if str(_meta_field(r, "id") or "").startswith(ref)]
        if len(named) == 1:
            return named[0]
        matches = [r.id for r in named]
    close = matches[:5] or difflib.get_close_matches(ref, ids, n=5, cutoff=0.4)
    hint = f"closest: {', '.join(close)}" if close else "list runs with abbench ls"
    what = "is ambiguous" if len(matches) > 1 else "not found"
    raise StoreError(f"run {ref!r} {what} in {results}", hint=hint)
