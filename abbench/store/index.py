"""A SQLite index of the run folders, for fast ``ls`` and ``history``.

The run folders stay the source of truth. ``<results>/index.sqlite`` is a cache
built from them: :func:`open_index` creates it when missing, applies the schema
migrations it lacks, and :meth:`Index.refresh` re-reads every run whose
``run.json`` or ``samples.jsonl`` changed (mtime or size), adds new runs and drops
removed ones, all in one transaction. A damaged index file is deleted and rebuilt;
one written by a newer abbench is refused. When the results directory cannot be
written, the index lives in memory for the command.

What it holds: one row per run (its metadata), one per arm (label, commit), one
per (run, arm, workload, metric, round) with the mean of that round's valid reps
(of the comparable records only: :func:`abbench.model.rounds.comparable_records`, as
the run's report takes them), and the problems met while reading (corrupt lines,
unreadable run.json).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from abbench.errors import StoreError
from abbench.model.records import Sample, SlotRecord
from abbench.model.rounds import comparable_records, round_values
from abbench.store.run import RUN_FILE, SAMPLES_FILE, Run

INDEX_FILE = "index.sqlite"

#: bumped when what is extracted from a run changes: every run is then re-read
#: (2: values only from the comparable records, as the report takes them)
INGEST_VERSION = 2


def _script(db: sqlite3.Connection, sql: str) -> None:
    """Run ``;``-separated statements inside the caller's transaction (executescript
    would commit it)."""
    for stmt in sql.split(";"):
        if stmt.strip():
            db.execute(stmt)


def _m001_initial(db: sqlite3.Connection) -> None:
    _script(db, """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE runs (
            id TEXT PRIMARY KEY, path TEXT NOT NULL, created TEXT, created_ts REAL,
            status TEXT, rounds INTEGER, rounds_done INTEGER, reps INTEGER,
            run_order TEXT, baseline TEXT, machine TEXT, host TEXT, config_digest TEXT,
            n_samples INTEGER NOT NULL DEFAULT 0, n_invalid INTEGER NOT NULL DEFAULT 0,
            n_failed_slots INTEGER NOT NULL DEFAULT 0, error TEXT,
            run_stamp TEXT NOT NULL, samples_stamp TEXT NOT NULL);
        CREATE TABLE arms (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            position INTEGER NOT NULL, name TEXT NOT NULL, label TEXT NOT NULL,
            commit_id TEXT, PRIMARY KEY (run_id, name));
        CREATE TABLE vals (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            arm TEXT NOT NULL, workload TEXT NOT NULL, metric TEXT NOT NULL,
            round INTEGER NOT NULL, value REAL NOT NULL,
            PRIMARY KEY (run_id, arm, workload, metric, round));
        CREATE TABLE problems (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            message TEXT NOT NULL);
    """)


def _m002_lookups(db: sqlite3.Connection) -> None:
    _script(db, """
        CREATE INDEX vals_by_metric ON vals (metric, workload);
        CREATE INDEX runs_by_time ON runs (created_ts);
        CREATE INDEX problems_by_run ON problems (run_id);
    """)


#: applied in order; ``PRAGMA user_version`` counts those applied
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("initial", _m001_initial),
    ("lookups", _m002_lookups),
]


class ArmInfo(NamedTuple):
    name: str
    label: str
    commit: str | None


class RunInfo(NamedTuple):
    """One indexed run, as ``abbench ls`` shows it."""

    id: str
    path: str
    created: str | None
    created_ts: float | None
    status: str
    rounds: int | None
    rounds_done: int | None
    arms: tuple[ArmInfo, ...]
    baseline: str | None
    machine: str | None
    n_samples: int
    n_invalid: int
    n_failed_slots: int
    error: str | None


class RunValue(NamedTuple):
    """One run's value of one arm: its rounds' mean, min and max (positive values)."""

    run_id: str
    created_ts: float | None
    arm: str
    label: str
    commit: str | None
    mean: float
    lo: float
    hi: float
    n_rounds: int


class RoundValue(NamedTuple):
    """One round's value (its reps averaged) of one arm in one run."""

    run_id: str
    created_ts: float | None
    arm: str
    label: str
    commit: str | None
    round: int
    value: float


@dataclass(frozen=True)
class RefreshStats:
    scanned: int
    read: int
    dropped: int


def _stamp(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return "-"
    return f"{st.st_mtime_ns}:{st.st_size}"


def _timestamp(created: Any) -> float | None:
    if not isinstance(created, str):
        return None
    try:
        t = dt.datetime.fromisoformat(created)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.astimezone()
    return t.timestamp()


class Index:
    """An open index of one results directory (use :func:`open_index`)."""

    def __init__(self, db: sqlite3.Connection, results: Path, path: Path | None):
        self.db = db
        self.results = results
        self.path = path

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ updating
    def _run_folders(self) -> Iterator[tuple[str, str, str, str]]:
        """(id, folder, run.json stamp, samples stamp) of every run folder."""
        try:
            entries = list(os.scandir(self.results))
        except FileNotFoundError:
            return
        except OSError as e:
            raise StoreError(f"cannot list the results directory: {e.strerror}",
                             where=str(self.results)) from None
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            run_stamp = _stamp(os.path.join(entry.path, RUN_FILE))
            if run_stamp != "-":
                yield (entry.name, entry.path, run_stamp,
                       _stamp(os.path.join(entry.path, SAMPLES_FILE)))

    def refresh(self) -> RefreshStats:
        """Bring the index up to date with the run folders (one transaction)."""
        known = {row[0]: (row[1], row[2]) for row in
                 self.db.execute("SELECT id, run_stamp, samples_stamp FROM runs")}
        seen: set[str] = set()
        todo: list[tuple[str, str, str, str]] = []
        for run_id, path, run_stamp, samples_stamp in self._run_folders():
            seen.add(run_id)
            if known.get(run_id) != (run_stamp, samples_stamp):
                todo.append((run_id, path, run_stamp, samples_stamp))
        gone = [i for i in known if i not in seen]
        if todo or gone:
            with self._transaction():
                for run_id in gone:
                    self.db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
                for run_id, path, run_stamp, samples_stamp in todo:
                    self._ingest(run_id, Path(path), run_stamp, samples_stamp)
        return RefreshStats(scanned=len(seen), read=len(todo), dropped=len(gone))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _ingest(self, run_id: str, p: Path, run_stamp: str, samples_stamp: str) -> None:
        db = self.db
        db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        run = Run(p)
        try:
            meta = run.meta()
        except StoreError as e:
            db.execute("INSERT INTO runs (id, path, status, error, run_stamp, samples_stamp) "
                       "VALUES (?, ?, 'unreadable', ?, ?, ?)",
                       (run_id, str(p), str(e).replace("\n", "; "), run_stamp, samples_stamp))
            return
        problems: list[str] = []
        try:
            records = run.records(problems)
        except StoreError as e:  # a record abbench cannot read: the run's values are left out
            problems.append(str(e).replace("\n", "; "))
            records = []
        samples = [r for r in records if isinstance(r, Sample)]
        failed = sum(1 for r in records if isinstance(r, SlotRecord) and r.failed)
        env = meta.get("environment") or {}
        db.execute(
            "INSERT INTO runs (id, path, created, created_ts, status, rounds, rounds_done, reps,"
            " run_order, baseline, machine, host, config_digest, n_samples, n_invalid,"
            " n_failed_slots, run_stamp, samples_stamp)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, str(p), meta.get("created"), _timestamp(meta.get("created")),
             meta.get("status") or "unknown", meta.get("rounds"), meta.get("rounds_done"),
             meta.get("reps"), meta.get("order"), meta.get("baseline"),
             env.get("gpu_summary") or env.get("cpu"), env.get("host"),
             meta.get("config_digest"), len(samples),
             sum(1 for r in samples if not r.valid), failed,
             run_stamp, samples_stamp))
        arms = [a for a in meta.get("arms") or [] if isinstance(a, dict) and a.get("name")]
        db.executemany("INSERT OR REPLACE INTO arms VALUES (?, ?, ?, ?, ?)",
                       [(run_id, i, a["name"], a.get("label") or a["name"], a.get("commit"))
                        for i, a in enumerate(arms)])
        try:  # the values the run's own report compares (Pinpoint's rule), no others
            values = round_values(comparable_records(records, meta))
        except (KeyError, TypeError, ValueError) as e:
            problems.append(f"{run.samples_path}: a sample lacks a field ({e}); "
                            "its values are left out of the index")
            values = {}
        db.executemany("INSERT INTO vals VALUES (?, ?, ?, ?, ?, ?)",
                       [(run_id, arm, key.workload, key.metric, rnd, v)
                        for key, by_arm in values.items()
                        for arm, rounds in by_arm.items() for rnd, v in rounds.items()])
        db.executemany("INSERT INTO problems VALUES (?, ?)", [(run_id, m) for m in problems])

    # ------------------------------------------------------------ queries
    def runs(self, *, label: str | None = None, since: float | None = None,
             until: float | None = None) -> list[RunInfo]:
        """Runs oldest first, filtered by arm label/name (substring) and time."""
        sql = ("SELECT id, path, created, created_ts, status, rounds, rounds_done, baseline,"
               " machine, n_samples, n_invalid, n_failed_slots, error FROM runs WHERE 1=1")
        args: list[Any] = []
        if since is not None:
            sql += " AND created_ts >= ?"
            args.append(since)
        if until is not None:
            sql += " AND created_ts < ?"
            args.append(until)
        if label:
            sql += (" AND id IN (SELECT run_id FROM arms WHERE instr(lower(label), lower(?)) "
                    "OR instr(lower(name), lower(?)))")
            args += [label, label]
        sql += " ORDER BY coalesce(created_ts, 0), id"
        arms: dict[str, list[ArmInfo]] = {}
        for run_id, name, lab, commit in self.db.execute(
                "SELECT run_id, name, label, commit_id FROM arms ORDER BY run_id, position"):
            arms.setdefault(run_id, []).append(ArmInfo(name, lab, commit))
        return [RunInfo(rid, path, created, ts, status, rounds, done,
                        tuple(arms.get(rid, ())), base, machine, n_s, n_i, n_f, err)
                for rid, path, created, ts, status, rounds, done, base, machine, n_s, n_i, n_f,
                err in self.db.execute(sql, args)]

    def round_values(self, metric: str, workloads: Iterable[str] | None = None,
                     labels: Iterable[str] | None = None) -> list[RoundValue]:
        """Every stored round value of ``metric``, oldest run first."""
        sql = ("SELECT v.run_id, r.created_ts, v.arm, a.label, a.commit_id, v.round, v.value"
               " FROM vals v JOIN runs r ON r.id = v.run_id"
               " JOIN arms a ON a.run_id = v.run_id AND a.name = v.arm WHERE v.metric = ?")
        args: list[Any] = [metric]
        for col, wanted in (("v.workload", workloads), ("a.label", labels)):
            if wanted is not None:
                wanted = list(wanted)
                sql += f" AND {col} IN ({', '.join('?' * len(wanted))})"
                args += wanted
        sql += " ORDER BY coalesce(r.created_ts, 0), v.run_id, a.position, v.round"
        return [RoundValue(run_id, ts, arm, lab, commit, rnd, value)
                for run_id, ts, arm, lab, commit, rnd, value in self.db.execute(sql, args)]

    def run_values(self, metric: str, workload: str, labels: Iterable[str] | None = None
                   ) -> list[RunValue]:
        """Per run and arm, the mean/min/max of the positive round values, oldest first."""
        sql = ("SELECT v.run_id, r.created_ts, v.arm, a.label, a.commit_id, avg(v.value),"
               " min(v.value), max(v.value), count(*) FROM vals v"
               " JOIN runs r ON r.id = v.run_id"
               " JOIN arms a ON a.run_id = v.run_id AND a.name = v.arm"
               " WHERE v.metric = ? AND v.workload = ? AND v.value > 0")
        args: list[Any] = [metric, workload]
        if labels is not None:
            wanted = list(labels)
            sql += f" AND a.label IN ({', '.join('?' * len(wanted))})"
            args += wanted
        sql += (" GROUP BY v.run_id, v.arm"
                " ORDER BY coalesce(r.created_ts, 0), v.run_id, a.position")
        return [RunValue(*row) for row in self.db.execute(sql, args)]

    def series_keys(self) -> list[tuple[str, str]]:
        """Every (metric, workload) stored, sorted."""
        return [(m, w) for m, w in self.db.execute(
            "SELECT DISTINCT metric, workload FROM vals ORDER BY metric, workload")]

    def problems(self, run_ids: Iterable[str] | None = None) -> list[str]:
        """Problems met reading these runs (all runs when None)."""
        wanted = set(run_ids) if run_ids is not None else None
        rows = self.db.execute("SELECT run_id, message FROM problems ORDER BY run_id, rowid")
        return [m for run_id, m in rows if wanted is None or run_id in wanted]

    def run_errors(self) -> list[str]:
        return [f"{path}: {err}" for path, err in self.db.execute(
            "SELECT path, error FROM runs WHERE error IS NOT NULL ORDER BY id")]


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    return db


def _migrate(db: sqlite3.Connection, where: str) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StoreError(f"the index has schema version {version}; this abbench reads up to "
                         f"{len(MIGRATIONS)}", where=where,
                         hint="upgrade abbench, or delete the index file: it is rebuilt "
                              "from the run folders")
    if version == len(MIGRATIONS):
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]  # another process?
        for n, (_name, step) in enumerate(MIGRATIONS[version:], version + 1):
            step(db)
            db.execute(f"PRAGMA user_version = {n}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _check_ingest(db: sqlite3.Connection) -> None:
    row = db.execute("SELECT value FROM meta WHERE key = 'ingest'").fetchone()
    if row is None or row[0] != str(INGEST_VERSION):
        db.execute("BEGIN IMMEDIATE")
        db.execute("DELETE FROM runs")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('ingest', ?)", (str(INGEST_VERSION),))
        db.execute("COMMIT")


def open_index(results: Path, *, refresh: bool = True) -> Index:
    """The index of ``results`` (created, migrated and refreshed as needed)."""
    results = Path(results)
    path = results / INDEX_FILE
    index: Index | None = None
    if results.is_dir() and os.access(results, os.W_OK | os.X_OK):
        try:
            db = _connect(str(path))
            _migrate(db, str(path))
            _check_ingest(db)
            index = Index(db, results, path)
        except sqlite3.DatabaseError:
            # not a database, or damaged: it is only a cache, so start again
            with contextlib.suppress(Exception):
                db.close()
            for suffix in ("", "-journal", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{path}{suffix}")
            db = _connect(str(path))
            _migrate(db, str(path))
            _check_ingest(db)
            index = Index(db, results, path)
    if index is None:
        db = _connect(":memory:")
        _migrate(db, ":memory:")
        _check_ingest(db)
        index = Index(db, results, None)
    if refresh:
        index.refresh()
    return index


__all__ = ["INDEX_FILE", "MIGRATIONS", "ArmInfo", "Index", "RoundValue", "RunInfo", "RunValue",
           "open_index"]
