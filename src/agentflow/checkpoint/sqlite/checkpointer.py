"""A durable checkpointer in one SQLite file, safe across tasks, threads and processes.

Why it is shaped this way (the full story, with figures, is docs/sqlite.md):

* Every write goes through **one writer thread** owning one long-lived connection.
  It drains whatever writes are waiting, applies them in one ``BEGIN IMMEDIATE``
  transaction (each compare-and-set decided in order, a conflict failing only its
  own put) and commits once: **group commit**. Eight concurrent writers then cost
  about one fsync, not eight, and every put is still durable before it returns.
* Reads run on **their own thread and connection**, so a read never waits behind
  the writer's fsync (WAL lets readers proceed during a write).
* The event loop only checks arguments and parks on a future; encoding,
  redaction and SQL run on the worker threads, so a many-megabyte state or a slow
  redactor never stalls other tasks.
* A thread-summary table is updated in the same transaction as each put, prune
  and delete, so listing threads (by status too) and finding due timers cost
  O(page), not a scan of every checkpoint.

The threads live in :mod:`~agentflow.checkpoint.sqlite.workers`, the tables, SQL
text and opening of a file in :mod:`~agentflow.checkpoint.sqlite.schema`.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

from agentflow.checkpoint.backend import CheckpointerBase, EncodedCheckpoint, StoredRow
from agentflow.checkpoint.base import Checkpoint, Redactor, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.sqlite.schema import (
    DUE,
    GET_LATEST,
    GET_STEP,
    HISTORY,
    KEY,
    LIST_AFTER,
    LIST_STATUS_AFTER,
    READ_SECRET,
    REBUILD_SUMMARY,
    REVISION,
    SCHEMA_VERSION,
    STORE_SECRET,
    UPSERT,
    UPSERT_SUMMARY,
)
from agentflow.checkpoint.sqlite.workers import Pair, PairKey, acquire_pair, release_pair
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    StoreUnavailable,
)

__all__ = ["SCHEMA_VERSION", "SYNCHRONOUS_MODES", "SqliteCheckpointer"]

#: Accepted values of ``synchronous``, weakest to strongest (SQLite's PRAGMA).
SYNCHRONOUS_MODES: Final = ("OFF", "NORMAL", "FULL", "EXTRA")

#: Rows per history read: bounds memory while keeping thread hops rare.
_HISTORY_BATCH: Final = 256
#: History payloads above this are decoded on the reader thread, smaller ones as yielded.
_DECODE_ON_LOOP_MAX: Final = 64 * 1024
#: SQLite's default SQLITE_MAX_LENGTH: a larger payload would fail its whole group.
_MAX_PAYLOAD: Final = 1_000_000_000

# Primary result codes (the low byte of an extended code) and what they mean to a caller.
_CORRUPT_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_UNAVAILABLE_CODES: Final = frozenset(
    getattr(sqlite3, f"SQLITE_{name}")
    for name in ("BUSY", "LOCKED", "IOERR", "FULL", "CANTOPEN", "PROTOCOL", "NOMEM")
)


def _put_rows(
    conn: sqlite3.Connection, namespace: str, cp: EncodedCheckpoint, if_revision: int | None
) -> int | None:
    if if_revision is not None:
        rows = conn.execute(REVISION, (namespace, cp.thread, cp.step)).fetchall()
        current = rows[0][0] if rows else 0
        if current != if_revision:
            return int(current)
    key, status = (namespace, cp.thread, cp.step), (cp.interrupted, cp.done)
    waiting_us = cp.wake_us if cp.status == "waiting" else None
    conn.execute(
        UPSERT, (*key, cp.ts_us, cp.ts, *status, cp.wake_at, cp.payload, waiting_us, cp.status)
    )
    conn.execute(UPSERT_SUMMARY, (*key, *status, cp.ts, cp.wake_at, cp.status, waiting_us))
    return None


def _summaries(rows: Any) -> list[ThreadInfo]:
    return [
        ThreadInfo(thread, step, bool(interrupted), bool(done), ts, wake_at)
        for thread, step, interrupted, done, ts, wake_at in rows
    ]


class SqliteCheckpointer(CheckpointerBase):
    """Durable checkpointer backed by one SQLite file in WAL mode.

    ``synchronous`` is SQLite's durability knob: ``"FULL"`` (default) syncs the
    log at every commit, so a put that returned survives power loss;
    ``"NORMAL"`` survives a crash of the process but may lose the last commits
    on power loss; ``"OFF"`` leaves flushing to the OS; ``"EXTRA"`` also syncs
    the directory. ``busy_timeout`` (seconds) is how long a write waits for
    another process holding the file's write lock before raising
    :class:`~agentflow.errors.StoreUnavailable`. With ``secure_permissions``
    (default) a new file is created owner-only (0600, and its WAL files with
    it) in directories created owner-only (0700). With ``create=False`` a
    file that does not exist or holds no agentflow tables raises
    :class:`~agentflow.errors.StoreNotFound` on the first call, and nothing is
    created (read-only callers).

    The two worker threads and their connections start on first use, are
    shared by every checkpointer open on the same file in this process, and
    stop when the last of them is closed (``close`` or ``async with``), after
    the queued writes.
    ``put`` encodes the checkpoint on the writer thread: do not mutate its
    state until ``put`` returns.
    """

    kind = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str] = ".runs/checkpoints.db",
        *,
        redact: Redactor | None = None,
        namespace: str | None = None,
        codec: CheckpointCodec | None = None,
        synchronous: str = "FULL",
        busy_timeout: float = 5.0,
        secure_permissions: bool = True,
        create: bool = True,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec)
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
        private = bool(secure_permissions)
        self._key: PairKey = (
            os.path.abspath(self.path),
            mode,
            float(busy_timeout),
            private,
            bool(create),
        )
        self._pair: Pair | None = None

    def __repr__(self) -> str:
        return f"SqliteCheckpointer({str(self.path)!r}, namespace={self.namespace!r})"

    def _started(self) -> Pair:
        pair = self._pair
        if pair is None:
            self._check_open()
            pair = self._pair = acquire_pair(self._key)
        return pair

    async def _write(self, prepare: Callable[[], Callable[[sqlite3.Connection], Any]]) -> Any:
        return await self._started().writer.submit(prepare)

    async def _read(self, read: Callable[[sqlite3.Connection], Any]) -> Any:
        return await self._started().reader.submit(read)

    # -- hooks ---------------------------------------------------------------

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        namespace = self._namespace

        def prepare() -> Callable[[sqlite3.Connection], int | None]:
            encoded = encode()
            if len(encoded.payload) > _MAX_PAYLOAD:
                raise InvalidArgument(
                    f"checkpoint of thread {thread!r} encodes to {len(encoded.payload):,} "
                    f"bytes; SQLite stores at most {_MAX_PAYLOAD:,}"
                )
            return lambda conn: _put_rows(conn, namespace, encoded, if_revision)

        found: int | None = await self._write(prepare)
        return found

    async def _delete_steps(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        key: tuple[object, ...] = (self._namespace, thread)
        delete, bounds = f"DELETE FROM agentflow_checkpoints WHERE {KEY}", list[object](key)
        if before_step is not None:
            delete += " AND step < ?"
            bounds.append(before_step)
        if cutoff_us is not None:
            delete += " AND ts_us < ?"
            bounds.append(cutoff_us)

        def apply(conn: sqlite3.Connection) -> int:
            removed: int = conn.execute(delete, bounds).rowcount
            if removed:
                conn.execute(f"DELETE FROM agentflow_threads WHERE {KEY}", key)
                conn.execute(REBUILD_SUMMARY, key)
            return removed

        removed: int = await self._write(lambda: apply)
        return removed

    async def _read_step(self, thread: str, step: int | None) -> Checkpoint | None:
        key = (self._namespace, thread)
        sql, args = (GET_LATEST, key) if step is None else (GET_STEP, (*key, step))

        def read(conn: sqlite3.Connection) -> Checkpoint | None:
            rows = conn.execute(sql, args).fetchall()
            return self._decode_row(thread, rows[0]) if rows else None

        found: Checkpoint | None = await self._read(read)
        return found

    async def _read_history(self, thread: str) -> AsyncIterator[StoredRow | Checkpoint]:
        """Stream in keyset batches, reading the next batch while this one is consumed.

        Rows are decoded one at a time as they are yielded, so only what the
        caller holds is alive as objects (a whole decoded batch costs more in
        garbage collection than the decoding itself); a payload over
        ``_DECODE_ON_LOOP_MAX`` bytes is decoded on the reader thread instead,
        so no single step stalls the event loop.
        """
        key = (self._namespace, thread)

        def batch_after(after: int) -> Callable[[sqlite3.Connection], list[Any]]:
            def read(conn: sqlite3.Connection) -> list[Any]:
                rows = conn.execute(HISTORY, (*key, after, _HISTORY_BATCH)).fetchall()
                big = _DECODE_ON_LOOP_MAX
                return [
                    self._decode_row(thread, row) if len(row[2]) > big else StoredRow(*row)
                    for row in rows
                ]

            return read

        reader = self._started().reader
        pending: asyncio.Future[list[Any]] | None = reader.submit(batch_after(-1))
        try:
            while pending is not None:
                batch, pending = await pending, None
                if len(batch) == _HISTORY_BATCH:
                    pending = reader.submit(batch_after(batch[-1].step))
                for item in batch:
                    yield item
        finally:
            if pending is not None:
                pending.cancel()

    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        sql, args = (
            (LIST_AFTER, (self._namespace, after, limit))
            if status is None
            else (LIST_STATUS_AFTER, (self._namespace, status, after, limit))
        )
        found: list[ThreadInfo] = await self._read(lambda conn: _summaries(conn.execute(sql, args)))
        return found

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        wake_us, thread = after if after is not None else (-(2**63), "")
        args = (self._namespace, now_us, wake_us, thread, limit)
        found: list[ThreadInfo] = await self._read(lambda conn: _summaries(conn.execute(DUE, args)))
        return found

    async def _cursor_secret(self) -> bytes:
        def read(conn: sqlite3.Connection) -> Any:
            rows = conn.execute(READ_SECRET).fetchall()
            return rows[0][0] if rows else None

        secret = await self._read(read)
        if secret is None:
            fresh = os.urandom(SECRET_BYTES)
            await self._write(lambda: lambda conn: conn.execute(STORE_SECRET, (fresh,)))
            secret = await self._read(read)
        if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
            raise CheckpointCorrupted(f"{self.path}: the stored cursor secret is damaged")
        return secret

    async def _close_store(self) -> None:
        """Finish queued writes, then close both connections and stop both threads
        (unless another open checkpointer on the same file still uses them)."""
        pair, self._pair = self._pair, None
        if pair is not None:
            await release_pair(self._key, pair)

    def _driver_error(self, exc: Exception, operation: str) -> AgentflowError | None:
        if not isinstance(exc, sqlite3.Error | OSError):
            return None
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        kind: type[CheckpointError] = CheckpointError
        if code in _CORRUPT_CODES:
            kind = CheckpointCorrupted
        elif code in _UNAVAILABLE_CODES or isinstance(exc, OSError):
            kind = StoreUnavailable
        return kind(f"sqlite {operation} on {self.path}: {exc}")
