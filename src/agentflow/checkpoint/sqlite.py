"""A durable checkpointer in one SQLite file, safe across tasks, threads and processes.

Why it is shaped this way (the full story, with figures, is docs/sqlite.md):

* Every write goes through **one writer thread** owning one long-lived connection.
  It drains whatever puts are waiting, applies them in one ``BEGIN IMMEDIATE``
  transaction (each compare-and-set decided in order, a conflict failing only its
  own put) and commits once: **group commit**. Eight concurrent writers then cost
  about one fsync, not eight, and every put is still durable before it returns.
* Reads run on **their own thread and connection**, so a read never waits behind
  the writer's fsync (WAL lets readers proceed during a write).
* The event loop only validates arguments and parks on a future; encoding,
  redaction, SQL and decoding all happen on the worker threads, so even a
  many-megabyte state or a slow redactor never stalls other tasks.
* A thread-summary table is updated in the same transaction as each put, prune
  and delete, so listing threads costs O(page) instead of a scan of every
  checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from agentflow.checkpoint.base import Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.codec import (
    EncodedCheckpoint,
    decode,
    encode,
    parse_instant,
    validate_namespace,
    validate_step,
    validate_thread,
)
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.checkpoint.paging import check_page_args, check_prune_bounds
from agentflow.checkpoint.redaction import redact_none
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    InvalidThreadId,
    StoreUnavailable,
)

__all__ = ["SCHEMA_VERSION", "SYNCHRONOUS_MODES", "SqliteCheckpointer"]

#: Version of the tables below, stored in ``agentflow_meta``. A file written by
#: a newer agentflow is refused rather than misread.
SCHEMA_VERSION: Final = 1
#: Accepted values of ``synchronous``, weakest to strongest (SQLite's PRAGMA).
SYNCHRONOUS_MODES: Final = ("OFF", "NORMAL", "FULL", "EXTRA")

_BACKEND: Final = "sqlite"
#: Rows per history read: bounds memory while keeping thread hops rare.
_HISTORY_BATCH: Final = 256
#: Larger history payloads are decoded on the reader thread, smaller ones as yielded.
_DECODE_ON_LOOP_MAX: Final = 64 * 1024
#: Most jobs one transaction takes, so one commit never holds the lock for long.
_MAX_GROUP: Final = 128

_SCHEMA: Final = (
    # Payload last: reading the small columns never touches its overflow pages.
    """CREATE TABLE agentflow_checkpoints (
        namespace TEXT NOT NULL, thread TEXT NOT NULL, step INTEGER NOT NULL,
        revision INTEGER NOT NULL, ts_us INTEGER NOT NULL, ts TEXT NOT NULL,
        interrupted INTEGER NOT NULL, done INTEGER NOT NULL, wake_at TEXT,
        payload BLOB NOT NULL,
        PRIMARY KEY (namespace, thread, step))""",
    """CREATE TABLE agentflow_threads (
        namespace TEXT NOT NULL, thread TEXT NOT NULL, latest_step INTEGER NOT NULL,
        interrupted INTEGER NOT NULL, done INTEGER NOT NULL, ts TEXT NOT NULL, wake_at TEXT,
        PRIMARY KEY (namespace, thread)) WITHOUT ROWID""",
)
_KEY: Final = "namespace = ? AND thread = ?"
_SELECT_REVISION: Final = f"SELECT revision FROM agentflow_checkpoints WHERE {_KEY} AND step = ?"
_UPSERT: Final = """INSERT INTO agentflow_checkpoints
    (namespace, thread, step, revision, ts_us, ts, interrupted, done, wake_at, payload)
    VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (namespace, thread, step) DO UPDATE SET
    revision = revision + 1, ts_us = excluded.ts_us, ts = excluded.ts,
    interrupted = excluded.interrupted, done = excluded.done, wake_at = excluded.wake_at,
    payload = excluded.payload"""
_UPSERT_SUMMARY: Final = """INSERT INTO agentflow_threads
    (namespace, thread, latest_step, interrupted, done, ts, wake_at) VALUES (?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (namespace, thread) DO UPDATE SET
    latest_step = excluded.latest_step, interrupted = excluded.interrupted,
    done = excluded.done, ts = excluded.ts, wake_at = excluded.wake_at
    WHERE excluded.latest_step >= agentflow_threads.latest_step"""
_REBUILD_SUMMARY: Final = f"""INSERT INTO agentflow_threads
    SELECT namespace, thread, step, interrupted, done, ts, wake_at FROM agentflow_checkpoints
    WHERE {_KEY} ORDER BY step DESC LIMIT 1"""
_GET_LATEST: Final = (
    f"SELECT step, revision, payload FROM agentflow_checkpoints WHERE {_KEY} "
    "ORDER BY step DESC LIMIT 1"
)
_GET_STEP: Final = (
    f"SELECT step, revision, payload FROM agentflow_checkpoints WHERE {_KEY} AND step = ?"
)
_HISTORY: Final = (
    f"SELECT step, revision, payload FROM agentflow_checkpoints WHERE {_KEY} AND step > ? "
    "ORDER BY step LIMIT ?"
)
_SUMMARY_COLUMNS: Final = "thread, latest_step, interrupted, done, ts, wake_at"
_LIST_OFFSET: Final = (
    f"SELECT {_SUMMARY_COLUMNS} FROM agentflow_threads WHERE namespace = ? "
    "ORDER BY thread LIMIT ? OFFSET ?"
)
_LIST_AFTER: Final = (
    f"SELECT {_SUMMARY_COLUMNS} FROM agentflow_threads WHERE namespace = ? AND thread > ? "
    "ORDER BY thread LIMIT ?"
)

# Primary result codes (the low byte of an extended code) and what they mean to a caller.
_CORRUPT_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_UNAVAILABLE_CODES: Final = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_NOMEM,
    }
)


def _store_error(exc: BaseException) -> BaseException:
    """A fresh typed error for one caller, keeping the driver error as ``__cause__``.

    Each waiting caller gets its own instance so tracebacks of concurrent
    failures do not pile onto one shared object.
    """
    if isinstance(exc, sqlite3.Error):
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        kind: type[CheckpointError] = CheckpointError
        if code in _CORRUPT_CODES:
            kind = CheckpointCorrupted
        elif code in _UNAVAILABLE_CODES:
            kind = StoreUnavailable
        error: BaseException = kind(f"sqlite: {exc}")
        error.__cause__ = exc
        return error
    if isinstance(exc, OSError):
        error = StoreUnavailable(f"sqlite file unavailable: {exc}")
        error.__cause__ = exc
        return error
    error = copy.copy(exc)
    error.__cause__ = exc.__cause__
    return error


def _sql_key(thread: object) -> str:
    """Validate a thread id, also refusing lone surrogates that SQLite cannot store."""
    key = validate_thread(thread)
    if not key.isascii():
        try:
            key.encode()
        except UnicodeEncodeError as exc:
            raise InvalidThreadId(f"thread id {key!r} is not valid Unicode") from exc
    return key


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, outcome in outcomes:
        if future.done():  # the caller was cancelled; nobody is waiting
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


#: A queued job: the caller's loop, its future, and the work (None asks the thread to stop).
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any] | None]


class _Worker:
    """One daemon thread owning one connection, fed by a queue of jobs.

    Results reach each caller's loop with one ``call_soon_threadsafe`` per
    drained group, so a group of N jobs costs one loop wake-up, not N.
    ``group`` runs a drained group (the writer: one transaction); a job that
    arrives after the thread stopped is failed, never left hanging.
    """

    def __init__(
        self,
        name: str,
        connect: Callable[[], sqlite3.Connection],
        group: Callable[[sqlite3.Connection, list[Callable[..., Any]]], list[Any]],
    ) -> None:
        self._connect = connect
        self._group = group
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.opened = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, work: Callable[..., Any] | None) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((loop, future, work))
        return future

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        failure: BaseException | None = None
        try:
            conn = self._connect()
        except Exception as exc:  # reported to every job: the caller decides what to do
            failure = exc
        finally:
            self.opened.set()
        stop: list[_Job] = []
        while not stop:
            jobs = [self._queue.get()]
            while len(jobs) < _MAX_GROUP:
                try:
                    jobs.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = [job for job in jobs if job[2] is None]
            work = [job for job in jobs if job[2] is not None]
            if work:
                if conn is None:
                    outcomes: list[Any] = [_store_error(failure) for _ in work]  # type: ignore[arg-type]
                else:
                    outcomes = self._group(conn, [job[2] for job in work])  # type: ignore[misc]
                _deliver(work, outcomes)
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        closed = CheckpointError("the SqliteCheckpointer is closed")
        late: list[_Job] = []
        with contextlib.suppress(queue.Empty):
            while True:
                late.append(self._queue.get_nowait())
        _deliver(late, [closed] * len(late))
        _deliver(stop, [None] * len(stop))


def _deliver(jobs: list[_Job], outcomes: list[Any]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
    for (loop, future, _), outcome in zip(jobs, outcomes, strict=True):
        by_loop.setdefault(loop, []).append((future, outcome))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, settled)


def _read_each(conn: sqlite3.Connection, works: list[Callable[..., Any]]) -> list[Any]:
    outcomes: list[Any] = []
    for work in works:
        try:
            outcomes.append(work(conn))
        except Exception as exc:
            outcomes.append(_store_error(exc))
    return outcomes


def _write_group(conn: sqlite3.Connection, preps: list[Callable[..., Any]]) -> list[Any]:
    """Apply a group of writes in one transaction and commit once.

    Each job is a *prepare* callable run before the lock is taken (encoding,
    redaction; bad input fails only its own job) that returns the callable to
    run inside the transaction. A :class:`CheckpointConflict` fails only its
    job, having written nothing; any other error rolls back the whole group,
    so every job in it fails and none of it persisted.
    """
    outcomes: list[Any] = [None] * len(preps)
    live: list[tuple[int, Callable[[sqlite3.Connection], Any]]] = []
    for index, prepare in enumerate(preps):
        try:
            live.append((index, prepare()))
        except Exception as exc:
            outcomes[index] = exc
    if not live:
        return outcomes
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for index, apply in live:
                try:
                    outcomes[index] = apply(conn)
                except CheckpointConflict as exc:
                    outcomes[index] = exc
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
    except Exception as exc:
        for index, _ in live:
            outcomes[index] = _store_error(exc)
    return outcomes


class SqliteCheckpointer:
    """Durable checkpointer backed by one SQLite file in WAL mode.

    ``synchronous`` is SQLite's durability knob: ``"FULL"`` (default) fsyncs the
    log at every commit, so a put that returned survives power loss;
    ``"NORMAL"`` survives a crash of the process but may lose the last commits
    on power loss; ``"OFF"`` leaves it to the OS; ``"EXTRA"`` also syncs the
    directory. ``busy_timeout`` (seconds) is how long a write waits for another
    process holding the file's write lock before raising
    :class:`~agentflow.errors.StoreUnavailable`.

    Worker threads and connections are created on first use and stopped by
    :meth:`close` (or ``async with``), which first finishes queued writes. The
    checkpoint passed to :meth:`put` is encoded on the writer thread: do not
    mutate its state until ``put`` returns.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ".runs/checkpoints.db",
        *,
        redact: Redactor | None = None,
        namespace: str | None = None,
        synchronous: str = "FULL",
        busy_timeout: float = 5.0,
    ) -> None:
        if not isinstance(path, str | os.PathLike) or str(path) in {"", ":memory:"}:
            raise InvalidArgument(
                f"path must name a database file (use MemoryCheckpointer in memory), got {path!r}"
            )
        mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if mode not in SYNCHRONOUS_MODES:
            raise InvalidArgument(
                f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}"
            )
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise InvalidArgument(f"busy_timeout must be seconds, got {busy_timeout!r}")
        if not 0 <= busy_timeout < 86_400:
            raise InvalidArgument(
                f"busy_timeout must be from 0 to 86400 seconds, got {busy_timeout}"
            )
        self.path = Path(path)
        self.synchronous: str = mode
        self._busy_timeout = float(busy_timeout)
        self._redact = redact or redact_none
        self._namespace = _sql_namespace(namespace)
        self._writer: _Worker | None = None
        self._reader: _Worker | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------

    async def __aenter__(self) -> SqliteCheckpointer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Finish queued writes, close both connections and stop both threads."""
        if self._closed:
            return
        self._closed = True
        workers = [w for w in (self._writer, self._reader) if w is not None]
        for stopped in [w.submit(None) for w in workers]:
            await stopped
        for worker in workers:
            worker.thread.join()

    def _workers(self) -> tuple[_Worker, _Worker]:
        if self._closed:
            raise CheckpointError("the SqliteCheckpointer is closed")
        if self._writer is None or self._reader is None:
            writer = _Worker("agentflow-sqlite-writer", self._open_writer, _write_group)
            opened = writer.opened
            self._reader = _Worker(
                "agentflow-sqlite-reader", lambda: self._open_reader(opened), _read_each
            )
            self._writer = writer
        return self._writer, self._reader

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, cached_statements=32
        )

    def _open_writer(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            if str(mode).lower() != "wal":
                raise CheckpointError(f"{self.path} cannot use WAL (journal_mode is {mode})")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")  # one of SYNCHRONOUS_MODES
            _ensure_schema(conn, self.path)
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_reader(self, writer_opened: threading.Event) -> sqlite3.Connection:
        # The writer creates the schema first; if it failed, reads fail the same way
        # (the reader's own check below then raises the same kind of error).
        writer_opened.wait()
        conn = self._connect()
        try:
            conn.execute("PRAGMA query_only=ON")
            _ensure_schema(conn, self.path, create=False)
        except BaseException:
            conn.close()
            raise
        return conn

    # -- writes ------------------------------------------------------------

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        if if_revision is not None and (
            isinstance(if_revision, bool) or not isinstance(if_revision, int) or if_revision < 0
        ):
            raise InvalidArgument(f"if_revision must be None or an int >= 0, got {if_revision!r}")
        if not isinstance(cp, Checkpoint):
            raise InvalidArgument(f"put takes a Checkpoint, got {type(cp).__name__}")
        _sql_key(cp.thread)
        namespace, redact = self._namespace, self._redact

        def prepare() -> Callable[[sqlite3.Connection], str]:
            encoded = encode(cp, redact)
            return lambda conn: _put_rows(conn, namespace, encoded, if_revision)

        writer, _ = self._workers()
        result: str = await writer.submit(prepare)
        return result

    async def delete_thread(self, thread: str) -> None:
        args = (self._namespace, _sql_key(thread))

        def apply(conn: sqlite3.Connection) -> None:
            conn.execute(f"DELETE FROM agentflow_checkpoints WHERE {_KEY}", args)
            conn.execute(f"DELETE FROM agentflow_threads WHERE {_KEY}", args)

        writer, _ = self._workers()
        await writer.submit(lambda: apply)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        key = (self._namespace, _sql_key(thread))
        clauses, bounds = [], []
        if before_step is not None:
            clauses.append(" AND step < ?")
            bounds.append(before_step)
        if older_than is not None:
            clauses.append(" AND ts_us < ?")
            bounds.append(parse_instant(older_than, what="older_than"))
        delete = f"DELETE FROM agentflow_checkpoints WHERE {_KEY}{''.join(clauses)}"

        def apply(conn: sqlite3.Connection) -> int:
            removed = conn.execute(delete, (*key, *bounds)).rowcount
            if removed:
                conn.execute(f"DELETE FROM agentflow_threads WHERE {_KEY}", key)
                conn.execute(_REBUILD_SUMMARY, key)
            return removed

        writer, _ = self._workers()
        result: int = await writer.submit(lambda: apply)
        return result

    # -- reads -------------------------------------------------------------

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        key = (self._namespace, _sql_key(thread))
        sql, args = (_GET_LATEST, key) if step is None else (_GET_STEP, (*key, validate_step(step)))

        def read(conn: sqlite3.Connection) -> Checkpoint | None:
            rows = conn.execute(sql, args).fetchall()
            return _decoded(key[1], rows[0]) if rows else None

        _, reader = self._workers()
        result: Checkpoint | None = await reader.submit(read)
        return result

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        """Stream in keyset batches, reading the next batch while this one is consumed.

        Rows are decoded one at a time as they are yielded, so only the
        checkpoint the caller holds is alive as objects (a whole decoded batch
        would cost far more in garbage collection than the decoding itself);
        a payload over ``_DECODE_ON_LOOP_MAX`` bytes is decoded on the reader
        thread instead, so no single step stalls the event loop.
        """
        key = (self._namespace, _sql_key(thread))

        def read(after: int) -> Callable[[sqlite3.Connection], list[Any]]:
            def rows(conn: sqlite3.Connection) -> list[Any]:
                found = conn.execute(_HISTORY, (*key, after, _HISTORY_BATCH)).fetchall()
                return [
                    _decoded(key[1], row) if len(row[2]) > _DECODE_ON_LOOP_MAX else row
                    for row in found
                ]

            return rows

        _, reader = self._workers()
        pending: asyncio.Future[list[Any]] | None = reader.submit(read(-1))
        try:
            while pending is not None:
                batch = await pending
                pending = None
                if len(batch) == _HISTORY_BATCH:
                    last = batch[-1]
                    pending = reader.submit(
                        read(last.step if isinstance(last, Checkpoint) else last[0])
                    )
                for item in batch:
                    yield item if isinstance(item, Checkpoint) else _decoded(key[1], item)
        finally:
            if pending is not None:
                pending.cancel()

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        check_page_args(limit, offset)
        return await self._summaries(_LIST_OFFSET, (self._namespace, limit, offset))

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        check_page_args(limit)
        after = "" if cursor is None else decode_cursor(_BACKEND, self._namespace, cursor)
        infos = await self._summaries(_LIST_AFTER, (self._namespace, after, limit + 1))
        if len(infos) <= limit:
            return ThreadPage(infos, None)
        del infos[limit:]
        return ThreadPage(infos, encode_cursor(_BACKEND, self._namespace, infos[-1].thread))

    async def _summaries(self, sql: str, args: tuple[object, ...]) -> list[ThreadInfo]:
        def read(conn: sqlite3.Connection) -> list[ThreadInfo]:
            return [
                ThreadInfo(thread, step, bool(interrupted), bool(done), ts, wake_at)
                for thread, step, interrupted, done, ts, wake_at in conn.execute(sql, args)
            ]

        _, reader = self._workers()
        result: list[ThreadInfo] = await reader.submit(read)
        return result


def _sql_namespace(namespace: object) -> str:
    stored = validate_namespace(namespace)
    try:
        stored.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"namespace {stored!r} is not valid Unicode") from exc
    return stored


def _ensure_schema(conn: sqlite3.Connection, path: Path, *, create: bool = True) -> None:
    """Create the tables on a new file, or refuse a file whose schema we do not know.

    The version lives in our own ``agentflow_meta`` table rather than
    ``PRAGMA user_version`` so that a file shared with another application
    keeps its own version slot. Creation runs under the write lock, so two
    processes opening a new file at once cannot both create it.
    """
    if create:
        conn.execute("BEGIN IMMEDIATE")
    try:
        if create:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS agentflow_meta "
                "(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID"
            )
        rows = conn.execute(
            "SELECT value FROM agentflow_meta WHERE key = 'schema_version'"
        ).fetchall()
        if not rows and create:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO agentflow_meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,)
            )
        elif not rows or not isinstance(rows[0][0], int) or rows[0][0] < 1:
            raise CheckpointCorrupted(f"{path} has no valid agentflow schema version")
        elif rows[0][0] > SCHEMA_VERSION:
            raise CheckpointError(
                f"{path} has agentflow schema version {rows[0][0]}, newer than the "
                f"version {SCHEMA_VERSION} this agentflow understands; upgrade agentflow"
            )
        if create:
            conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


def _put_rows(
    conn: sqlite3.Connection, namespace: str, cp: EncodedCheckpoint, if_revision: int | None
) -> str:
    if if_revision is not None:
        rows = conn.execute(_SELECT_REVISION, (namespace, cp.thread, cp.step)).fetchall()
        current = rows[0][0] if rows else 0
        if current != if_revision:
            raise CheckpointConflict(cp.thread, cp.step, if_revision, current)
    status = (cp.interrupted, cp.done)
    conn.execute(
        _UPSERT,
        (namespace, cp.thread, cp.step, cp.ts_us, cp.ts, *status, cp.wake_at, cp.payload),
    )
    conn.execute(_UPSERT_SUMMARY, (namespace, cp.thread, cp.step, *status, cp.ts, cp.wake_at))
    return f"{cp.thread}:{cp.step}"


def _decoded(thread: str, row: tuple[int, int, bytes]) -> Checkpoint:
    step, revision, payload = row
    cp = decode(payload, revision)
    if cp.thread != thread or cp.step != step:
        raise CheckpointCorrupted(
            f"row ({thread!r}, {step}) holds the checkpoint of ({cp.thread!r}, {cp.step})"
        )
    return cp
