"""The tables of the SQLite store, their one schema version, and opening a file for them.

One version (``schema_version`` in ``agentflow_meta``) covers every table of
the file: checkpoints, thread summaries, records, journal entries, events.
Opening switches a new file to WAL (waiting out processes that open it at
the same moment), sets ``synchronous``, and creates the tables, migrates a
file of an older version, or refuses one whose version is newer than this
agentflow understands. Creation and migration re-check the version under the
write lock, so processes opening a file at once change it exactly once.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from agentflow.checkpoint.sqlite.sql import BODY_PART, HEAD_PART, RUN_STATUS_OF
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.durable.errors import DurableCorrupted, DurableError
from agentflow.durable.wire.canonical import canonical_json, parse_json
from agentflow.errors import (
    CheckpointCorrupted,
    CheckpointError,
    IncompatibleSchema,
    InvalidArgument,
    StoreNotFound,
)

__all__ = ["SCHEMA_VERSION", "open_connection", "transaction"]

#: Version of every table below, kept in ``agentflow_meta``. A file written by a
#: newer agentflow is refused rather than misread; an older one is migrated.
#: 1: checkpoints and summaries; 2: status and wake instant in the summary;
#: 3: one store: records (their journal entries as rows), events, and the
#: status a record imposes on its thread's summary; 4: each record's run
#: definition digest, and the claimed records indexed by claim token; 5: the
#: summary without the latest step's number and instant (read from the step's
#: row), so a put that keeps the thread's status leaves the summary unwritten.
SCHEMA_VERSION: Final = 5
#: ``RETURNING`` (3.35), ``iif`` (3.32), ``DROP COLUMN`` (3.35) and STRICT tables (3.37).
_MIN_SQLITE: Final = (3, 37, 0)

_RUNS_DDL: Final = f"""CREATE TABLE agentflow_runs (namespace TEXT NOT NULL, key TEXT NOT NULL,
    part INTEGER NOT NULL CHECK (part IN ({HEAD_PART}, {BODY_PART})),
    revision INTEGER, status TEXT, cycle_index INTEGER, resume_attempt INTEGER,
    claim_token TEXT, claimed_cycle INTEGER, lease_expires_at_ms INTEGER, terminal INTEGER,
    terminal_acknowledged INTEGER, ambiguous INTEGER, identity TEXT, body BLOB,
    PRIMARY KEY (namespace, key, part)) STRICT"""
_EVENTS_DDL: Final = """CREATE TABLE agentflow_events (seq INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL, event_id TEXT NOT NULL, payload_digest TEXT NOT NULL,
    run_id TEXT, parent_run_id TEXT, event BLOB NOT NULL, UNIQUE (namespace, event_id)) STRICT"""
# Payload last: reading the small columns never touches its overflow pages.
# A thread's summary carries its latest step's status, the status its record
# imposes (if any), and its wake instant only while it waits on a timer; the
# latest step itself is found by the checkpoints' primary key.
# STRICT record tables: a column holds only its declared type, so a comparison
# in a guard never meets SQLite's type affinity (text "1" is not the integer 1).
_TABLES: Final = (
    """CREATE TABLE agentflow_checkpoints (namespace TEXT NOT NULL, thread TEXT NOT NULL,
    step INTEGER NOT NULL, revision INTEGER NOT NULL, ts_us INTEGER NOT NULL, ts TEXT NOT NULL,
    interrupted INTEGER NOT NULL, done INTEGER NOT NULL, wake_at TEXT, payload BLOB NOT NULL,
    wake_us INTEGER, status TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, thread, step))""",
    """CREATE TABLE agentflow_threads (namespace TEXT NOT NULL, thread TEXT NOT NULL,
    interrupted INTEGER NOT NULL, done INTEGER NOT NULL, wake_at TEXT,
    status TEXT NOT NULL DEFAULT '', wake_us INTEGER, run_status TEXT,
    PRIMARY KEY (namespace, thread)) WITHOUT ROWID""",
)
_PARTS: Final = (
    _RUNS_DDL,
    """CREATE TABLE agentflow_journal (namespace TEXT NOT NULL, key TEXT NOT NULL,
    kind TEXT NOT NULL, idx INTEGER NOT NULL, entry BLOB NOT NULL,
    PRIMARY KEY (namespace, key, kind, idx)) STRICT, WITHOUT ROWID""",
    _EVENTS_DDL,
)
_INDEXES: Final = (
    """CREATE INDEX IF NOT EXISTS agentflow_threads_by_status
    ON agentflow_threads (namespace, coalesce(run_status, status), thread)""",
    """CREATE INDEX IF NOT EXISTS agentflow_threads_due
    ON agentflow_threads (namespace, wake_us, thread) WHERE wake_us IS NOT NULL""",
    f"""CREATE INDEX IF NOT EXISTS agentflow_runs_by_status ON agentflow_runs
    (namespace, status, key) WHERE part = {HEAD_PART}""",
    """CREATE INDEX IF NOT EXISTS agentflow_events_by_run ON agentflow_events
    (namespace, run_id, seq) WHERE run_id IS NOT NULL""",
    """CREATE INDEX IF NOT EXISTS agentflow_events_by_parent ON agentflow_events
    (namespace, parent_run_id, seq) WHERE parent_run_id IS NOT NULL""",
    # The claimed records by token: one holder's claims, and the live leases a
    # fleet's max_concurrent counts (version 4).
    f"""CREATE INDEX IF NOT EXISTS agentflow_runs_by_holder ON agentflow_runs
    (namespace, claim_token) WHERE part = {HEAD_PART} AND claim_token IS NOT NULL""",
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
#: From version 2 (and the durable tables of durable schema version 1, if any) to 3.
_MIGRATE_2_TO_3: Final = (
    "ALTER TABLE agentflow_threads ADD COLUMN run_status TEXT",
    "DROP INDEX IF EXISTS agentflow_threads_by_status",
)
#: The durable tables as durable schema version 1 kept them, moved into version 3's.
_MOVE_DURABLE_1: Final = (
    """INSERT INTO agentflow_runs SELECT namespace, key, part, revision, status, cycle_index,
    resume_attempt, claim_token, claimed_cycle, lease_expires_at_ms, terminal,
    terminal_acknowledged, ambiguous, identity, body FROM agentflow_durable_runs""",
    """INSERT INTO agentflow_events SELECT seq, namespace, event_id, payload_digest, run_id,
    parent_run_id, event FROM agentflow_durable_events ORDER BY seq""",
    "DROP TABLE agentflow_durable_runs",
    "DROP TABLE agentflow_durable_events",
    "DELETE FROM agentflow_meta WHERE key = 'durable_schema_version'",
)
#: From version 3 to 4 (and the last step of a new file): each record's run definition
#: digest, so a worker fleet claims its own graphs' due runs and counts their live
#: leases (``claim_due``); a record written before keeps NULL: any definition.
_MIGRATE_3_TO_4: Final = ("ALTER TABLE agentflow_runs ADD COLUMN definition TEXT",)
#: From version 4 to 5: the summary's copy of its latest step's number and instant goes
#: (every other summary column, and every index, is kept as it was).
_MIGRATE_4_TO_5: Final = (
    "ALTER TABLE agentflow_threads DROP COLUMN latest_step",
    "ALTER TABLE agentflow_threads DROP COLUMN ts",
)
_OLD_JOURNALS: Final = f"""SELECT namespace, key, model_journal, tool_journal
    FROM agentflow_durable_runs WHERE part = {HEAD_PART}"""
_META: Final = "SELECT value FROM agentflow_meta WHERE key = ?"

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


def _meta(conn: sqlite3.Connection, key: str) -> Any:
    tables = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentflow_meta'"
    if not conn.execute(tables).fetchall():
        return None
    rows = conn.execute(_META, (key,)).fetchall()
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
    for statement in (*_TABLES, *_PARTS, *_MIGRATE_3_TO_4):
        conn.execute(statement)
    conn.execute("INSERT INTO agentflow_meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))


def _migrate_from_1(conn: sqlite3.Connection) -> None:
    conn.create_function("agentflow_instant", 1, _instant_or_null, deterministic=True)
    for statement in _MIGRATE_1_TO_2:
        conn.execute(statement)


def _old_entries(namespace: str, key: str, text: object) -> list[bytes]:
    """The entries of a version-1 journal column (a JSON array of stored parts),
    each as the canonical bytes the durable store read it as."""
    try:
        items = parse_json(text) if isinstance(text, str) else None
    except DurableError:
        items = None
    if not isinstance(items, list):
        raise DurableCorrupted(
            "checkpoint_row_invalid",
            f"cannot migrate: the stored journal of {key!r} (namespace {namespace!r}) is damaged",
        )
    return [canonical_json(item, what="stored journal entry") for item in items]


def _migrate_durable_1(conn: sqlite3.Connection) -> None:
    """Move the records and events of durable schema version 1 into version 3's tables:
    each journal column becomes one row per entry, the bytes kept as they were read."""
    for namespace, key, model, tool in conn.execute(_OLD_JOURNALS).fetchall():
        for kind, text in (("model", model), ("tool", tool)):
            conn.executemany(
                "INSERT INTO agentflow_journal VALUES (?, ?, ?, ?, ?)",
                [
                    (namespace, key, kind, index, entry)
                    for index, entry in enumerate(_old_entries(namespace, key, text))
                ],
            )
    for statement in _MOVE_DURABLE_1:
        conn.execute(statement)


def _migrate_from_2(conn: sqlite3.Connection, path: Path) -> None:
    durable = _meta(conn, "durable_schema_version")
    if durable is not None and durable != 1:
        _refuse(path, durable, "durable schema version", 1)
    for statement in _MIGRATE_2_TO_3:
        conn.execute(statement)
    for statement in _PARTS:
        conn.execute(statement)
    if durable == 1:
        _migrate_durable_1(conn)
    conn.execute(
        f"""UPDATE agentflow_threads SET run_status = (SELECT {RUN_STATUS_OF} FROM agentflow_runs
        WHERE agentflow_runs.namespace = agentflow_threads.namespace
        AND key = thread AND part = {HEAD_PART})"""
    )


def _refuse(path: Path, version: object, what: str, known: int) -> None:
    if isinstance(version, int) and not isinstance(version, bool) and version > known:
        raise IncompatibleSchema(
            f"{path} has agentflow {what} {version}, newer than version "
            f"{known} that this agentflow understands; upgrade agentflow"
        )
    raise CheckpointCorrupted(f"{path} holds an invalid agentflow {what} {version!r}")


def _ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables in a new file, migrate an older one, or refuse a newer one.

    The version lives in our own ``agentflow_meta`` table rather than
    ``PRAGMA user_version``, so a file shared with another application keeps
    its version slot. A failed migration rolls back whole: the file stays as
    it was, at its old version.
    """
    version = _meta(conn, "schema_version")
    if version != SCHEMA_VERSION:
        with transaction(conn):
            version = _meta(conn, "schema_version")
            if version is None:
                _create(conn)
            elif version in (1, 2, 3, 4):
                if version == 1:
                    _migrate_from_1(conn)
                if version in (1, 2):
                    _migrate_from_2(conn, path)
                later = (*(_MIGRATE_3_TO_4 if version < 4 else ()), *_MIGRATE_4_TO_5)
                for statement in later:
                    conn.execute(statement)
                conn.execute(
                    "UPDATE agentflow_meta SET value = ? WHERE key = 'schema_version'",
                    (SCHEMA_VERSION,),
                )
            version = _meta(conn, "schema_version")
            if version == SCHEMA_VERSION:
                for statement in _INDEXES:
                    conn.execute(statement)
    if version != SCHEMA_VERSION:
        _refuse(path, version, "schema version", SCHEMA_VERSION)


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
        if _meta(conn, "schema_version") is None:
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
    if sqlite3.sqlite_version_info < _MIN_SQLITE:
        raise CheckpointError(
            f"the SQLite store needs SQLite {'.'.join(map(str, _MIN_SQLITE))} or newer,"
            f" this Python has {sqlite3.sqlite_version}"
        )
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
