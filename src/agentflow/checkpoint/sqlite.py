"""A durable checkpointer in one SQLite file, safe across tasks, threads and processes.

Why it is shaped this way (the full story, with figures, is docs/sqlite.md):

* Every write goes through **one writer thread** owning one long-lived connection.
  It drains whatever writes are waiting, applies them in one ``BEGIN IMMEDIATE``
  transaction (each compare-and-set decided in order, a conflict failing only its
  own put) and commits once: **group commit**. Eight concurrent writers then cost
  about one fsync, not eight, and every put is still durable before it returns.
* Reads run on **their own thread and connection**, so a read never waits behind
  the writer's fsync (WAL lets readers proceed during a write).
* The event loop only validates arguments and parks on a future; encoding,
  redaction and SQL run on the worker threads, so a many-megabyte state or a slow
  redactor never stalls other tasks.
* A thread-summary table is updated in the same transaction as each put, prune
  and delete, so listing threads costs O(page), not a scan of every checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

from agentflow.checkpoint.base import AsyncClosing, Checkpoint, Redactor, ThreadInfo, ThreadPage
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
    IncompatibleSchema,
    InvalidArgument,
    InvalidThreadId,
    StoreUnavailable,
)

__all__ = ["SCHEMA_VERSION", "SYNCHRONOUS_MODES", "SqliteCheckpointer"]

#: Version of the tables below, kept in ``agentflow_meta``. A file written by a
#: newer agentflow is refused rather than misread.
SCHEMA_VERSION: Final = 1
#: Accepted values of ``synchronous``, weakest to strongest (SQLite's PRAGMA).
SYNCHRONOUS_MODES: Final = ("OFF", "NORMAL", "FULL", "EXTRA")

_BACKEND: Final = "sqlite"
#: Rows per history read: bounds memory while keeping thread hops rare.
_HISTORY_BATCH: Final = 256
#: History payloads above this are decoded on the reader thread, smaller ones as yielded.
_DECODE_ON_LOOP_MAX: Final = 64 * 1024
#: SQLite's default SQLITE_MAX_LENGTH: a larger payload would fail its whole group.
_MAX_PAYLOAD: Final = 1_000_000_000
#: Most jobs one transaction takes, so one commit never holds the lock for long.
_MAX_GROUP: Final = 128

# Payload last: reading the small columns never touches its overflow pages.
_SCHEMA: Final = (
    """CREATE TABLE agentflow_checkpoints (namespace TEXT NOT NULL, thread TEXT NOT NULL,
    step INTEGER NOT NULL, revision INTEGER NOT NULL, ts_us INTEGER NOT NULL, ts TEXT NOT NULL,
    interrupted INTEGER NOT NULL, done INTEGER NOT NULL, wake_at TEXT, payload BLOB NOT NULL,
    PRIMARY KEY (namespace, thread, step))""",
    """CREATE TABLE agentflow_threads (namespace TEXT NOT NULL, thread TEXT NOT NULL,
    latest_step INTEGER NOT NULL, interrupted INTEGER NOT NULL, done INTEGER NOT NULL,
    ts TEXT NOT NULL, wake_at TEXT, PRIMARY KEY (namespace, thread)) WITHOUT ROWID""",
)
_META: Final = "SELECT value FROM agentflow_meta WHERE key = 'schema_version'"
_KEY: Final = "namespace = ? AND thread = ?"
_ROWS: Final = "SELECT step, revision, payload FROM agentflow_checkpoints WHERE " + _KEY
_GET_LATEST: Final = f"{_ROWS} ORDER BY step DESC LIMIT 1"
_GET_STEP: Final = f"{_ROWS} AND step = ?"
_HISTORY: Final = f"{_ROWS} AND step > ? ORDER BY step LIMIT ?"
_REVISION: Final = f"SELECT revision FROM agentflow_checkpoints WHERE {_KEY} AND step = ?"
_UPSERT: Final = """INSERT INTO agentflow_checkpoints VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (namespace, thread, step) DO UPDATE SET revision = revision + 1,
    ts_us = excluded.ts_us, ts = excluded.ts, interrupted = excluded.interrupted,
    done = excluded.done, wake_at = excluded.wake_at, payload = excluded.payload"""
_UPSERT_SUMMARY: Final = """INSERT INTO agentflow_threads VALUES (?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (namespace, thread) DO UPDATE SET latest_step = excluded.latest_step,
    interrupted = excluded.interrupted, done = excluded.done, ts = excluded.ts,
    wake_at = excluded.wake_at WHERE excluded.latest_step >= agentflow_threads.latest_step"""
_REBUILD_SUMMARY: Final = f"""INSERT INTO agentflow_threads SELECT namespace, thread, step,
    interrupted, done, ts, wake_at FROM agentflow_checkpoints WHERE {_KEY}
    ORDER BY step DESC LIMIT 1"""
_SUMMARIES: Final = (
    "SELECT thread, latest_step, interrupted, done, ts, wake_at FROM agentflow_threads"
)
_LIST_OFFSET: Final = f"{_SUMMARIES} WHERE namespace = ? ORDER BY thread LIMIT ? OFFSET ?"
_LIST_AFTER: Final = f"{_SUMMARIES} WHERE namespace = ? AND thread > ? ORDER BY thread LIMIT ?"

_BUSY_CODES: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
#: Pause between attempts to switch a contended new file to WAL.
_WAL_RETRY_SLEEP: Final = 0.005

# Primary result codes (the low byte of an extended code) and what they mean to a caller.
_CORRUPT_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_UNAVAILABLE_CODES: Final = frozenset(
    getattr(sqlite3, f"SQLITE_{name}")
    for name in ("BUSY", "LOCKED", "IOERR", "FULL", "CANTOPEN", "PROTOCOL", "NOMEM")
)

#: A queued job: the caller's loop, its future, and the work (None asks the thread to stop).
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any] | None]
_Outcome = tuple["asyncio.Future[Any]", Any]


def _typed(exc: BaseException, *, shared: bool = False) -> BaseException:
    """The error a caller sees: a driver error becomes a typed one (the driver's as
    ``__cause__``); anything else passes through.

    ``shared`` errors (a failed open or group, reported to every caller in it)
    are copied, so the tracebacks of callers that failed together do not pile
    onto one object.
    """
    if isinstance(exc, sqlite3.Error | OSError):
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        kind: type[CheckpointError] = CheckpointError
        if code in _CORRUPT_CODES:
            kind = CheckpointCorrupted
        elif code in _UNAVAILABLE_CODES or isinstance(exc, OSError):
            kind = StoreUnavailable
        error: BaseException = kind(f"sqlite: {exc}")
        error.__cause__ = exc
        return error
    if not shared:
        return exc
    error = copy.copy(exc)
    error.__cause__ = exc.__cause__
    return error


def _sql_text(value: str, error: type[InvalidArgument], what: str) -> str:
    """Refuse lone surrogates, which SQLite cannot store as text."""
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise error(f"{what} {value!r} is not valid Unicode") from exc
    return value


def _key(thread: object) -> str:
    return _sql_text(validate_thread(thread), InvalidThreadId, "thread id")


def _settle(outcomes: list[_Outcome]) -> None:
    for future, outcome in outcomes:
        if future.done():  # the caller was cancelled; nobody is waiting
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def _deliver(jobs: list[_Job], outcomes: list[Any]) -> None:
    """Hand results back with one ``call_soon_threadsafe`` per loop, not one per job."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for (loop, future, _), outcome in zip(jobs, outcomes, strict=True):
        by_loop.setdefault(loop, []).append((future, outcome))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, settled)


class _Worker:
    """One daemon thread owning one connection, fed through a queue.

    The thread drains every job waiting and passes them to ``run`` at once
    (the writer makes one transaction of them). The connection is opened on
    the first group and again after a failed open, so a transient error (a
    lock held at start-up) is not sticky. A job queued after the thread
    stopped is failed, never left hanging.
    """

    def __init__(
        self,
        name: str,
        connect: Callable[[], sqlite3.Connection],
        run: Callable[[sqlite3.Connection, list[Callable[..., Any]]], list[Any]],
    ) -> None:
        self._connect = connect
        self._run_group = run
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def submit(self, work: Callable[..., Any] | None) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((loop, future, work))
        return future

    def _drain(self) -> list[_Job]:
        jobs = [self._queue.get()]
        with contextlib.suppress(queue.Empty):
            while len(jobs) < _MAX_GROUP:
                jobs.append(self._queue.get_nowait())
        return jobs

    def _loop(self) -> None:
        conn: sqlite3.Connection | None = None
        stop: list[_Job] = []
        while not stop:
            jobs = self._drain()
            stop = [job for job in jobs if job[2] is None]
            work = [job for job in jobs if job[2] is not None]
            if not work:
                continue
            try:
                conn = conn or self._connect()
            except Exception as exc:
                _deliver(work, [_typed(exc, shared=True) for _ in work])
            else:
                _deliver(work, self._run_group(conn, [job[2] for job in work]))  # type: ignore[misc]
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        late: list[_Job] = []
        with contextlib.suppress(queue.Empty):
            while True:
                late.append(self._queue.get_nowait())
        _deliver(late, [CheckpointError("the SqliteCheckpointer is closed") for _ in late])
        _deliver(stop, [None] * len(stop))


class _Pair:
    """The writer and reader of one file, shared by every checkpointer on it here.

    Checkpointers of several tenants on one file then join one group commit
    instead of contending for SQLite's write lock, whose busy handler backs
    off by sleeping whole milliseconds.
    """

    def __init__(self, path: Path, synchronous: str, busy_timeout: float) -> None:
        self.writer = _Worker(
            "agentflow-sqlite-writer",
            lambda: _open(path, synchronous, busy_timeout, read_only=False),
            _write_group,
        )
        self.reader = _Worker(
            "agentflow-sqlite-reader",
            lambda: _open(path, synchronous, busy_timeout, read_only=True),
            _read_each,
        )
        self.users = 0


#: Open pairs by (absolute path, synchronous, busy_timeout), for this process only.
_PAIRS: dict[tuple[str, str, float], _Pair] = {}
_PAIRS_LOCK = threading.Lock()


def _forget_pairs_after_fork() -> None:
    """A forked child has none of the parent's threads, and maybe a held lock."""
    global _PAIRS_LOCK  # noqa: PLW0603
    _PAIRS_LOCK = threading.Lock()
    _PAIRS.clear()


os.register_at_fork(after_in_child=_forget_pairs_after_fork)


def _read_each(conn: sqlite3.Connection, reads: list[Callable[..., Any]]) -> list[Any]:
    outcomes: list[Any] = []
    for read in reads:
        try:
            outcomes.append(read(conn))
        except Exception as exc:
            outcomes.append(_typed(exc))
    return outcomes


def _write_group(conn: sqlite3.Connection, writes: list[Callable[..., Any]]) -> list[Any]:
    """Apply a group of writes in one transaction and commit once.

    Each write is a *prepare* callable, run before the lock is taken (encoding,
    redaction: bad input fails only its own write), returning the callable to
    run inside the transaction. A :class:`CheckpointConflict` fails only its
    write, which changed nothing; any other error rolls the whole group back,
    so every write in it fails and none of it persisted.
    """
    outcomes: list[Any] = [None] * len(writes)
    ready: list[tuple[int, Callable[[sqlite3.Connection], Any]]] = []
    for index, prepare in enumerate(writes):
        try:
            ready.append((index, prepare()))
        except Exception as exc:
            outcomes[index] = exc
    if not ready:
        return outcomes
    try:
        with _transaction(conn):
            for index, apply in ready:
                try:
                    outcomes[index] = apply(conn)
                except CheckpointConflict as exc:
                    outcomes[index] = exc
    except Exception as exc:
        for index, _ in ready:
            outcomes[index] = _typed(exc, shared=True)
    return outcomes


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Any:
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


def _ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables in a new file, or refuse a file whose schema we do not know.

    The version lives in our own ``agentflow_meta`` table rather than
    ``PRAGMA user_version``, so a file shared with another application keeps
    its version slot. Creation re-checks under the write lock, so processes
    opening a new file at once create it exactly once.
    """
    version = _schema_version(conn)
    if version is None:
        with _transaction(conn):
            version = _schema_version(conn)
            if version is None:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS agentflow_meta "
                    "(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID"
                )
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO agentflow_meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,)
                )
                version = SCHEMA_VERSION
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


def _open(
    path: Path, synchronous: str, busy_timeout: float, *, read_only: bool
) -> sqlite3.Connection:
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


def _put_rows(
    conn: sqlite3.Connection, namespace: str, cp: EncodedCheckpoint, if_revision: int | None
) -> str:
    if if_revision is not None:
        rows = conn.execute(_REVISION, (namespace, cp.thread, cp.step)).fetchall()
        current = rows[0][0] if rows else 0
        if current != if_revision:
            raise CheckpointConflict(cp.thread, cp.step, if_revision, current)
    key, status = (namespace, cp.thread, cp.step), (cp.interrupted, cp.done)
    conn.execute(_UPSERT, (*key, cp.ts_us, cp.ts, *status, cp.wake_at, cp.payload))
    conn.execute(_UPSERT_SUMMARY, (*key, *status, cp.ts, cp.wake_at))
    return f"{cp.thread}:{cp.step}"


def _decoded(thread: str, row: tuple[int, int, bytes]) -> Checkpoint:
    step, revision, payload = row
    cp = decode(payload, revision)
    if cp.thread != thread or cp.step != step:
        raise CheckpointCorrupted(
            f"row ({thread!r}, {step}) holds the checkpoint of ({cp.thread!r}, {cp.step})"
        )
    return cp


class SqliteCheckpointer(AsyncClosing):
    """Durable checkpointer backed by one SQLite file in WAL mode.

    ``synchronous`` is SQLite's durability knob: ``"FULL"`` (default) syncs the
    log at every commit, so a put that returned survives power loss;
    ``"NORMAL"`` survives a crash of the process but may lose the last commits
    on power loss; ``"OFF"`` leaves flushing to the OS; ``"EXTRA"`` also syncs
    the directory. ``busy_timeout`` (seconds) is how long a write waits for
    another process holding the file's write lock before raising
    :class:`~agentflow.errors.StoreUnavailable`.

    The two worker threads and their connections start on first use, are
    shared by every checkpointer open on the same file in this process, and
    stop when the last of them is closed (``close`` or ``async with``), after
    the queued writes.
    ``put`` encodes the checkpoint on the writer thread: do not mutate its
    state until ``put`` returns.
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
            raise InvalidArgument(f"path must name a database file, got {path!r}")
        mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if mode not in SYNCHRONOUS_MODES:
            raise InvalidArgument(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {mode!r}")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise InvalidArgument(f"busy_timeout must be seconds, got {busy_timeout!r}")
        if not 0 <= busy_timeout <= 86_400:
            raise InvalidArgument(f"busy_timeout must be 0 to 86400 seconds, not {busy_timeout}")
        self.path = Path(path)
        self.synchronous: str = mode
        self._busy_timeout = float(busy_timeout)
        self._redact = redact or redact_none
        self._namespace = _sql_text(validate_namespace(namespace), InvalidArgument, "namespace")
        self._key = (os.path.abspath(self.path), mode, self._busy_timeout)
        self._pair: _Pair | None = None
        self._closed = False

    async def close(self) -> None:
        """Finish queued writes, then close both connections and stop both threads
        (unless another open checkpointer on the same file still uses them)."""
        if self._closed:
            return
        self._closed = True
        pair, self._pair = self._pair, None
        if pair is None:
            return
        with _PAIRS_LOCK:
            pair.users -= 1
            if pair.users:
                return
            del _PAIRS[self._key]
        workers = (pair.writer, pair.reader)
        for stopped in [worker.submit(None) for worker in workers]:
            await stopped
        for worker in workers:
            worker.thread.join()

    def _started(self) -> _Pair:
        pair = self._pair
        if pair is None:
            if self._closed:
                raise CheckpointError("the SqliteCheckpointer is closed")
            with _PAIRS_LOCK:
                pair = _PAIRS.get(self._key)
                if pair is None:
                    pair = _PAIRS[self._key] = _Pair(Path(self._key[0]), *self._key[1:])
                pair.users += 1
            self._pair = pair
        return pair

    async def _write(self, prepare: Callable[[], Callable[[sqlite3.Connection], Any]]) -> Any:
        return await self._started().writer.submit(prepare)

    async def _read(self, read: Callable[[sqlite3.Connection], Any]) -> Any:
        return await self._started().reader.submit(read)

    # -- writes ------------------------------------------------------------

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        if if_revision is not None and (
            isinstance(if_revision, bool) or not isinstance(if_revision, int) or if_revision < 0
        ):
            raise InvalidArgument(f"if_revision must be None or an int >= 0, got {if_revision!r}")
        if not isinstance(cp, Checkpoint):
            raise InvalidArgument(f"put takes a Checkpoint, got {type(cp).__name__}")
        _key(cp.thread)
        namespace, redact = self._namespace, self._redact

        def prepare() -> Callable[[sqlite3.Connection], str]:
            encoded = encode(cp, redact)
            if len(encoded.payload) > _MAX_PAYLOAD:
                raise InvalidArgument(
                    f"checkpoint of thread {cp.thread!r} encodes to {len(encoded.payload):,} "
                    f"bytes; SQLite stores at most {_MAX_PAYLOAD:,}"
                )
            return lambda conn: _put_rows(conn, namespace, encoded, if_revision)

        result: str = await self._write(prepare)
        return result

    async def delete_thread(self, thread: str) -> None:
        key = (self._namespace, _key(thread))

        def apply(conn: sqlite3.Connection) -> None:
            conn.execute(f"DELETE FROM agentflow_checkpoints WHERE {_KEY}", key)
            conn.execute(f"DELETE FROM agentflow_threads WHERE {_KEY}", key)

        await self._write(lambda: apply)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        key: tuple[object, ...] = (self._namespace, _key(thread))
        delete, bounds = f"DELETE FROM agentflow_checkpoints WHERE {_KEY}", list[object](key)
        if before_step is not None:
            delete += " AND step < ?"
            bounds.append(before_step)
        if older_than is not None:
            delete += " AND ts_us < ?"
            bounds.append(parse_instant(older_than, what="older_than"))

        def apply(conn: sqlite3.Connection) -> int:
            removed: int = conn.execute(delete, bounds).rowcount
            if removed:
                conn.execute(f"DELETE FROM agentflow_threads WHERE {_KEY}", key)
                conn.execute(_REBUILD_SUMMARY, key)
            return removed

        result: int = await self._write(lambda: apply)
        return result

    # -- reads -------------------------------------------------------------

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        key = (self._namespace, _key(thread))
        sql, args = (_GET_LATEST, key) if step is None else (_GET_STEP, (*key, validate_step(step)))

        def read(conn: sqlite3.Connection) -> Checkpoint | None:
            rows = conn.execute(sql, args).fetchall()
            return _decoded(key[1], rows[0]) if rows else None

        result: Checkpoint | None = await self._read(read)
        return result

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        """Stream in keyset batches, reading the next batch while this one is consumed.

        Rows are decoded one at a time as they are yielded, so only what the
        caller holds is alive as objects (a whole decoded batch costs more in
        garbage collection than the decoding itself); a payload over
        ``_DECODE_ON_LOOP_MAX`` bytes is decoded on the reader thread instead,
        so no single step stalls the event loop.
        """
        key = (self._namespace, _key(thread))

        def batch_after(after: int) -> Callable[[sqlite3.Connection], list[Any]]:
            def read(conn: sqlite3.Connection) -> list[Any]:
                rows = conn.execute(_HISTORY, (*key, after, _HISTORY_BATCH)).fetchall()
                big = _DECODE_ON_LOOP_MAX
                return [_decoded(key[1], row) if len(row[2]) > big else row for row in rows]

            return read

        reader = self._started().reader
        pending: asyncio.Future[list[Any]] | None = reader.submit(batch_after(-1))
        try:
            while pending is not None:
                batch, pending = await pending, None
                if len(batch) == _HISTORY_BATCH:
                    last = batch[-1]
                    step = last.step if isinstance(last, Checkpoint) else last[0]
                    pending = reader.submit(batch_after(step))
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

        result: list[ThreadInfo] = await self._read(read)
        return result
