"""The tables and SQL text of the SQLite backend, and opening a file for them.

Opening switches a new file to WAL (waiting out processes that open it at the
same moment), sets ``synchronous``, and creates the tables, migrates a file of
an older schema version, or refuses one whose version is newer than this
agentflow understands.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import (
    CheckpointCorrupted,
    CheckpointError,
    IncompatibleSchema,
    InvalidArgument,
    StoreNotFound,
)

__all__ = [
    "DUE",
    "GET_LATEST",
    "GET_STEP",
    "HISTORY",
    "KEY",
    "LIST_AFTER",
    "LIST_STATUS_AFTER",
    "READ_SECRET",
    "REBUILD_SUMMARY",
    "REVISION",
    "SCHEMA_VERSION",
    "STORE_SECRET",
    "UPSERT",
    "UPSERT_SUMMARY",
    "open_connection",
    "transaction",
]

#: Version of the tables below, kept in ``agentflow_meta``. A file written by a
#: newer agentflow is refused rather than misread; an older one is migrated.
SCHEMA_VERSION: Final = 2

# Payload last: reading the small columns never touches its overflow pages.
# A thread's summary carries its latest step's status, and its wake instant only
# while it waits on a timer, so the two indexes below hold just what the status
# listing and list_due read.
_SCHEMA: Final = (
    """CREATE TABLE agentflow_checkpoints (namespace TEXT NOT NULL, thread TEXT NOT NULL,
    step INTEGER NOT NULL, revision INTEGER NOT NULL, ts_us INTEGER NOT NULL, ts TEXT NOT NULL,
    interrupted INTEGER NOT NULL, done INTEGER NOT NULL, wake_at TEXT, payload BLOB NOT NULL,
    wake_us INTEGER, status TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, thread, step))""",
    """CREATE TABLE agentflow_threads (namespace TEXT NOT NULL, thread TEXT NOT NULL,
    latest_step INTEGER NOT NULL, interrupted INTEGER NOT NULL, done INTEGER NOT NULL,
    ts TEXT NOT NULL, wake_at TEXT, status TEXT NOT NULL DEFAULT '', wake_us INTEGER,
    PRIMARY KEY (namespace, thread)) WITHOUT ROWID""",
)
_INDEXES: Final = (
    """CREATE INDEX IF NOT EXISTS agentflow_threads_by_status
    ON agentflow_threads (namespace, status, thread)""",
    """CREATE INDEX IF NOT EXISTS agentflow_threads_due
    ON agentflow_threads (namespace, wake_us, thread) WHERE wake_us IS NOT NULL""",
)
_STATUS_OF_ROW: Final = """CASE WHEN done THEN 'done'
    WHEN interrupted AND wake_at IS NOT NULL THEN 'waiting'
    WHEN interrupted THEN 'interrupted' ELSE 'running' END"""
#: From version 1 to 2: the status and wake instant of every row and summary.
_MIGRATE_1_TO_2: Final = (
    "ALTER TABLE agentflow_checkpoints ADD COLUMN wake_us INTEGER",
    "ALTER TABLE agentflow_checkpoints ADD COLUMN status TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE agentflow_threads ADD COLUMN status TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE agentflow_threads ADD COLUMN wake_us INTEGER",
    f"""UPDATE agentflow_checkpoints SET status = {_STATUS_OF_ROW},
    wake_us = CASE WHEN interrupted AND wake_at IS NOT NULL
    THEN agentflow_instant(wake_at) END""",
    f"""UPDATE agentflow_threads SET status = {_STATUS_OF_ROW},
    wake_us = CASE WHEN interrupted AND wake_at IS NOT NULL
    THEN agentflow_instant(wake_at) END""",
)
_META: Final = "SELECT value FROM agentflow_meta WHERE key = 'schema_version'"
KEY: Final = "namespace = ? AND thread = ?"
_ROWS: Final = "SELECT step, revision, payload FROM agentflow_checkpoints WHERE " + KEY
GET_LATEST: Final = f"{_ROWS} ORDER BY step DESC LIMIT 1"
GET_STEP: Final = f"{_ROWS} AND step = ?"
HISTORY: Final = f"{_ROWS} AND step > ? ORDER BY step LIMIT ?"
REVISION: Final = f"SELECT revision FROM agentflow_checkpoints WHERE {KEY} AND step = ?"
UPSERT: Final = """INSERT INTO agentflow_checkpoints VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (namespace, thread, step) DO UPDATE SET revision = revision + 1,
    ts_us = excluded.ts_us, ts = excluded.ts, interrupted = excluded.interrupted,
    done = excluded.done, wake_at = excluded.wake_at, payload = excluded.payload,
    wake_us = excluded.wake_us, status = excluded.status"""
UPSERT_SUMMARY: Final = """INSERT INTO agentflow_threads VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (namespace, thread) DO UPDATE SET latest_step = excluded.latest_step,
    interrupted = excluded.interrupted, done = excluded.done, ts = excluded.ts,
    wake_at = excluded.wake_at, status = excluded.status, wake_us = excluded.wake_us
    WHERE excluded.latest_step >= agentflow_threads.latest_step"""
REBUILD_SUMMARY: Final = f"""INSERT INTO agentflow_threads SELECT namespace, thread, step,
    interrupted, done, ts, wake_at, status, wake_us FROM agentflow_checkpoints WHERE {KEY}
    ORDER BY step DESC LIMIT 1"""
_SUMMARIES: Final = (
    "SELECT thread, latest_step, interrupted, done, ts, wake_at FROM agentflow_threads"
)
LIST_AFTER: Final = f"{_SUMMARIES} WHERE namespace = ? AND thread > ? ORDER BY thread LIMIT ?"
LIST_STATUS_AFTER: Final = (
    f"{_SUMMARIES} WHERE namespace = ? AND status = ? AND thread > ? ORDER BY thread LIMIT ?"
)
DUE: Final = f"""{_SUMMARIES} WHERE namespace = ? AND wake_us IS NOT NULL AND wake_us <= ?
    AND (wake_us, thread) > (?, ?) ORDER BY wake_us, thread LIMIT ?"""
STORE_SECRET: Final = "INSERT OR IGNORE INTO agentflow_meta VALUES ('cursor_secret', ?)"
READ_SECRET: Final = "SELECT value FROM agentflow_meta WHERE key = 'cursor_secret'"

_BUSY_CODES: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
#: Pause between attempts to switch a contended new file to WAL.
_WAL_RETRY_SLEEP: Final = 0.005


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


def _schema_version(conn: sqlite3.Connection) -> Any:
    tables = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentflow_meta'"
    if not conn.execute(tables).fetchall():
        return None
    rows = conn.execute(_META).fetchall()
    return rows[0][0] if rows else None


def _instant_or_null(text: object) -> int | None:
    try:
        return parse_instant(text)
    except InvalidArgument:
        return None


def _create(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS agentflow_meta "
        "(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID"
    )
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute("INSERT INTO agentflow_meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))


def _migrate_from_1(conn: sqlite3.Connection) -> None:
    conn.create_function("agentflow_instant", 1, _instant_or_null, deterministic=True)
    for statement in _MIGRATE_1_TO_2:
        conn.execute(statement)
    conn.execute("UPDATE agentflow_meta SET value = 2 WHERE key = 'schema_version'")


def _ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables in a new file, migrate an older one, or refuse a newer one.

    The version lives in our own ``agentflow_meta`` table rather than
    ``PRAGMA user_version``, so a file shared with another application keeps
    its version slot. Creation and migration re-check under the write lock, so
    processes opening a file at once change it exactly once.
    """
    version = _schema_version(conn)
    if version != SCHEMA_VERSION:
        with transaction(conn):
            version = _schema_version(conn)
            if version is None:
                _create(conn)
            elif version == 1:
                _migrate_from_1(conn)
            version = _schema_version(conn)
            if version == SCHEMA_VERSION:
                for statement in _INDEXES:
                    conn.execute(statement)
    if not isinstance(version, int) or version < 1:
        raise CheckpointCorrupted(f"{path} holds an invalid agentflow schema version {version!r}")
    if version > SCHEMA_VERSION:
        raise IncompatibleSchema(
            f"{path} has agentflow schema version {version}, newer than version "
            f"{SCHEMA_VERSION} that this agentflow understands; upgrade agentflow"
        )


def _use_wal(conn: sqlite3.Connection, path: Path, busy_timeout: float) -> None:
    """Switch a new file to WAL, waiting out processes that open it at the same moment.

    WAL mode persists in the file, so a file already in it needs no lock. The
    switch itself answers SQLITE_BUSY at once, without calling the busy
    handler, while another connection holds the file, so it is retried here
    until ``busy_timeout`` has passed.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            (journal,) = conn.execute("PRAGMA journal_mode").fetchone()
            if str(journal).lower() != "wal":
                (journal,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            break
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF not in _BUSY_CODES or time.monotonic() > deadline:
                raise
            time.sleep(_WAL_RETRY_SLEEP)
    if str(journal).lower() != "wal":
        raise CheckpointError(f"{path} cannot use WAL (journal_mode={journal})")


def _create_private(path: Path) -> None:
    """Create a missing file owner-only (its WAL and shared-memory files inherit the
    mode) in directories created owner-only; an existing file keeps its mode."""
    missing = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))


def _connect_existing(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """A connection to the agentflow store at ``path``, opened without creating the
    file (``mode=rw``); :class:`~agentflow.errors.StoreNotFound` when there is no
    file or it holds no agentflow tables, and nothing is written."""
    if not path.exists():
        raise StoreNotFound(f"no store at {path}")
    uri = f"{path.absolute().as_uri()}?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None)
    try:
        if _schema_version(conn) is None:
            raise StoreNotFound(f"no store at {path}: the file holds no agentflow tables")
    except BaseException:
        conn.close()
        raise
    return conn


def open_connection(
    path: Path,
    synchronous: str,
    busy_timeout: float,
    *,
    read_only: bool,
    private: bool,
    create: bool = True,
) -> sqlite3.Connection:
    """A connection to the store at ``path``, in WAL mode, its tables created or
    migrated; with ``create=False`` a missing store is refused and nothing made."""
    if not create:
        conn = _connect_existing(path, busy_timeout)
    else:
        if private:
            _create_private(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    try:
        _use_wal(conn, path, busy_timeout)
        conn.execute(f"PRAGMA synchronous={synchronous}")  # one of SYNCHRONOUS_MODES
        _ensure_schema(conn, path)
        if read_only:
            conn.execute("PRAGMA query_only=ON")
    except BaseException:
        conn.close()
        raise
    return conn
