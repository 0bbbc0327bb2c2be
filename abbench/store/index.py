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

import yaml

from abbench.errors import StoreError
from abbench.model.records import Sample, SlotRecord
from abbench.model.rounds import comparable_records, round_values
from abbench.model.runmeta import ArmMeta, Environment
from abbench.store.run import RUN_FILE, SAMPLES_FILE, Run

INDEX_FILE = "index.sqlite"

#: bumped when what is extracted from a run changes: every run is then re-read
#: (2: values only from the comparable records, as the report takes them;
#: 3: each value keyed by its whole row key, each arm's series, build and model)
INGEST_VERSION = 3


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


def _m003_row_keys(db: sqlite3.Connection) -> None:
    """Values keyed by the whole row key (a row id alone does not say its context,
    decode length or side calls in another run), and per arm what a history series
    follows: its declared series, build key and model file. The values are read again
    from the run folders (the ingest version changes with it)."""
    _script(db, """
        DROP INDEX vals_by_metric;
        DROP TABLE vals;
        CREATE TABLE vals (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            arm TEXT NOT NULL, workload TEXT NOT NULL, context INTEGER,
            decode_tokens INTEGER, side_calls INTEGER NOT NULL DEFAULT 0,
            metric TEXT NOT NULL, round INTEGER NOT NULL, value REAL NOT NULL,
            PRIMARY KEY (run_id, arm, workload, metric, round));
        CREATE INDEX vals_by_metric ON vals (metric, workload);
        ALTER TABLE arms ADD COLUMN series TEXT;
        ALTER TABLE arms ADD COLUMN build_key TEXT;
        ALTER TABLE arms ADD COLUMN model TEXT;
        DELETE FROM runs;
    """)


#: applied in order; ``PRAGMA user_version`` counts those applied
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("initial", _m001_initial),
    ("lookups", _m002_lookups),
    ("row keys", _m003_row_keys),
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


class KeyedRound(NamedTuple):
    """One round's value of one arm in one run, with everything a history series is
    keyed by: the arm (its declared series, else its name), the whole row key, the
    metric, and the point's commit, build key, config digest and model file."""

    run_id: str
    created_ts: float | None
    arm: str
    label: str
    series: str | None
    commit: str | None
    build_key: str | None
    model: str | None
    config_digest: str | None
    workload: str
    context: int | None
    decode_tokens: int | None
    side_calls: bool
    metric: str
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


def _text(x: Any) -> str | None:
    return x if isinstance(x, str) and x else None


def _commit(arm: ArmMeta) -> str | None:
    """The arm's declared commit, else its git arm's pinned sha."""
    return _text(arm.commit) or (_text(arm.git.sha) if arm.git is not None else None)


def _build_key(arm: ArmMeta) -> str | None:
    """What was built: a git arm's source, sha and patch set (``describe``)."""
    git = arm.git
    return (_text(git.describe) or _text(git.sha)) if git is not None else None


def _model(server: Any, model_var: str | None) -> str | None:
    """The model file the arm's server said it loaded (llama.cpp's ``/props``
    ``model_path``, else a ``model`` field), else the arms file's ``model`` var; its file
    name only (the folder differs between machines)."""
    path = None
    if isinstance(server, dict):
        path = _text(server.get("model_path")) or _text(server.get("model"))
    path = path or model_var
    return (os.path.basename(path.rstrip("/")) or path) if path else None


def _model_var(folder: Path) -> str | None:
    """``vars: model:`` of the run's own copy of its arms file, if it has one."""
    try:
        cfg = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeError, yaml.YAMLError):
        return None
    vars_ = cfg.get("vars") if isinstance(cfg, dict) else None
    return _text(vars_.get("model")) if isinstance(vars_, dict) else None



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
            meta = run.info()
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
        env = meta.environment or Environment()
        db.execute(
            "INSERT INTO runs (id, path, created, created_ts, status, rounds, rounds_done, reps,"
            " run_order, baseline, machine, host, config_digest, n_samples, n_invalid,"
            " n_failed_slots, run_stamp, samples_stamp)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, str(p), meta.created, _timestamp(meta.created),
             meta.status or "unknown", meta.rounds, meta.rounds_done,
             meta.reps if "reps" in meta.model_fields_set else None, meta.order, meta.baseline,
             env.gpu_summary or env.cpu, env.host, meta.config_digest, len(samples),
             sum(1 for r in samples if not r.valid), failed,
             run_stamp, samples_stamp))
        arms = [a for a in meta.arms if a.name]
        model_var = _model_var(p)
        db.executemany("INSERT OR REPLACE INTO arms (run_id, position, name, label, commit_id,"
                       " series, build_key, model) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       [(run_id, i, a.name, a.shown, _commit(a), _text(a.series),
                         _build_key(a), _model(meta.servers.get(a.name), model_var))
                        for i, a in enumerate(arms)])
        try:  # the values the run's own report compares (Pinpoint's rule), no others
            values = round_values(comparable_records(records, meta))
        except (KeyError, TypeError, ValueError) as e:
            problems.append(f"{run.samples_path}: a sample lacks a field ({e}); "
                            "its values are left out of the index")
            values = {}
        db.executemany("INSERT INTO vals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       [(run_id, arm, key.workload, key.context, key.decode_tokens,
                         key.side_calls, key.metric, rnd, v)
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


    def keyed_rounds(self, metrics: Iterable[str] | None = None,
                     workloads: Iterable[str] | None = None) -> list[KeyedRound]:
        """Every stored round value with its whole key, oldest run first (of these
        metrics and row ids, when given)."""
        sql = ("SELECT v.run_id, r.created_ts, v.arm, a.label, a.series, a.commit_id,"
               " a.build_key, a.model, r.config_digest, v.workload, v.context,"
               " v.decode_tokens, v.side_calls, v.metric, v.round, v.value"
               " FROM vals v JOIN runs r ON r.id = v.run_id"
               " JOIN arms a ON a.run_id = v.run_id AND a.name = v.arm WHERE 1=1")
        args: list[Any] = []
        for col, given in (("v.metric", metrics), ("v.workload", workloads)):
            if given is not None:
                wanted = list(given)
                sql += f" AND {col} IN ({', '.join('?' * len(wanted))})"
                args += wanted
        sql += " ORDER BY coalesce(r.created_ts, 0), v.run_id, a.position, v.metric, v.round"
        return [KeyedRound._make((*row[:12], bool(row[12]), *row[13:]))
                for row in self.db.execute(sql, args)]

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


#: how long a connection waits for another process's lock on the index
BUSY_TIMEOUT_S = 30.0


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
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


def _busy(e: sqlite3.OperationalError) -> bool:
    """Whether sqlite says another connection holds the database."""
    return "locked" in str(e) or "busy" in str(e)


def _check_index_path(path: Path) -> None:
    """The index is a regular file in the results folder, or absent: a directory, a
    device or a link (which would carry writes out of the folder) is refused."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    import stat

    what = ("a directory" if stat.S_ISDIR(st.st_mode) else "a symbolic link"
            if stat.S_ISLNK(st.st_mode) else None if stat.S_ISREG(st.st_mode)
            else "not a regular file")
    if what:
        raise StoreError(f"the index {path.name} is {what}", where=str(path),
                         hint="move it away: abbench keeps its index as a regular file in "
                              "the results folder and rebuilds it from the run folders")


def _rebuilt(path: Path) -> Index:
    """A new index in place of one that is not a database, or damaged (it is only a
    cache of the run folders)."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    db = _connect(str(path))
    _migrate(db, str(path))
    _check_ingest(db)
    return Index(db, path.parent, path)


def open_index(results: Path, *, refresh: bool = True) -> Index:
    """The index of ``results`` (created, migrated and refreshed as needed). One that
    another process holds locked is never deleted under it: the run folders are read
    into memory this once."""
    results = Path(results)
    path = results / INDEX_FILE
    index: Index | None = None
    _check_index_path(path)
    if results.is_dir() and os.access(results, os.W_OK | os.X_OK):
        db: sqlite3.Connection | None = None
        try:
            db = _connect(str(path))
            _migrate(db, str(path))
            _check_ingest(db)
            index = Index(db, results, path)
        except sqlite3.DatabaseError as e:
            if db is not None:
                with contextlib.suppress(Exception):
                    db.close()
            if not (isinstance(e, sqlite3.OperationalError) and _busy(e)):
                index = _rebuilt(path)  # not a database, or damaged: start again
    if index is None:
        mem = _connect(":memory:")
        _migrate(mem, ":memory:")
        _check_ingest(mem)
        index = Index(mem, results, None)
    if refresh:
        try:
            index.refresh()
        except sqlite3.OperationalError as e:
            if not _busy(e):
                raise
            index.close()
            raise StoreError(f"the index is held by another process for {BUSY_TIMEOUT_S:g} s",
                             where=str(path), hint="let the other abbench finish, then try "
                             "again") from None
    return index


__all__ = ["INDEX_FILE", "MIGRATIONS", "ArmInfo", "Index", "KeyedRound", "RunInfo",
           "RunValue", "open_index"]
