"""The checkpoints of the SQLite store: one row per step, one summary row per thread.

Puts are encoded on the writer thread (the *prepare* step of its group
commit), so a slow redactor or a many-megabyte state never stalls the event
loop; reads run on the reader thread and never wait behind the writer's
fsync (WAL). The summary row is kept in the same transaction as each put,
prune and delete, so listing threads (by status too) and finding due timers
cost O(page), not a scan of every checkpoint; a put writes it only when the
thread's status changes, so most commits write the step's pages alone.
"""

from __future__ import annotations

import abc
import asyncio
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final, get_args

from agentflow.checkpoint.backend import (
    CheckpointerBase,
    Decoded,
    EncodedCheckpoint,
    StepRange,
    StoredRow,
)
from agentflow.checkpoint.base import ThreadInfo, ThreadStatus
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.sqlite.connection import SqliteConnection
from agentflow.checkpoint.sqlite.sql import (
    DELETE_STEPS,
    DELETE_SUMMARY,
    DUE,
    GET_LATEST,
    GET_STEP,
    HISTORY,
    HISTORY_NEWEST_FIRST,
    LIST_AFTER,
    LIST_STATUS_AFTER,
    READ_SECRET,
    REBUILD_SUMMARY,
    REVISION,
    STEPS,
    STORE_SECRET,
    UPSERT,
    UPSERT_SUMMARY,
)
from agentflow.errors import CheckpointCorrupted, InvalidArgument

__all__ = ["SqliteCheckpoints", "checked_size", "put_rows"]

#: Rows per history read: bounds memory while keeping thread hops rare.
_HISTORY_BATCH: Final = 256
#: History payloads above this are decoded on the reader thread, smaller ones as yielded.
_DECODE_ON_LOOP_MAX: Final = 64 * 1024
#: SQLite's default SQLITE_MAX_LENGTH: a larger payload would fail its whole group.
_MAX_PAYLOAD: Final = 1_000_000_000
_THREAD_STATUSES: Final = frozenset(get_args(ThreadStatus))
#: The highest step a row can have (steps are signed 64-bit integers).
_LAST_STEP: Final = 2**63 - 1


def checked_size(encoded: EncodedCheckpoint) -> EncodedCheckpoint:
    """``encoded``, refused in *prepare* (so it fails alone) when SQLite cannot store it."""
    if len(encoded.payload) > _MAX_PAYLOAD:
        raise InvalidArgument(
            f"checkpoint of thread {encoded.thread!r} encodes to {len(encoded.payload):,} "
            f"bytes; SQLite stores at most {_MAX_PAYLOAD:,}"
        )
    return encoded


def put_rows(conn: sqlite3.Connection, namespace: str, cp: EncodedCheckpoint) -> None:
    """Upsert the step's row, and the thread's summary when it is the latest step."""
    key, status = (namespace, cp.thread, cp.step), (cp.interrupted, cp.done)
    waiting_us = cp.wake_us if cp.status == "waiting" else None
    conn.execute(
        UPSERT, (*key, cp.ts_us, cp.ts, *status, cp.wake_at, cp.payload, waiting_us, cp.status)
    )
    conn.execute(UPSERT_SUMMARY, (*key, *status, cp.wake_at, cp.status, waiting_us))


def _summaries(rows: Any) -> list[ThreadInfo]:
    infos = []
    for thread, step, interrupted, done, ts, wake_at, run_status in rows:
        if run_status is not None and run_status not in _THREAD_STATUSES:
            raise CheckpointCorrupted(f"thread {thread!r}: the stored run status is damaged")
        if step is None:
            raise CheckpointCorrupted(f"thread {thread!r}: a summary without a stored step")
        infos.append(
            ThreadInfo(thread, step, bool(interrupted), bool(done), ts, wake_at, run_status)
        )
    return infos


class SqliteCheckpoints(SqliteConnection, CheckpointerBase, abc.ABC):
    """The checkpoint hooks of :class:`~agentflow.checkpoint.sqlite.SqliteCheckpointer`."""

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        namespace = self._namespace

        def prepare() -> Callable[[sqlite3.Connection], int | None]:
            encoded = checked_size(encode())

            def apply(conn: sqlite3.Connection) -> int | None:
                if if_revision is not None:
                    rows = conn.execute(REVISION, (namespace, thread, step)).fetchall()
                    current = rows[0][0] if rows else 0
                    if current != if_revision:
                        return int(current)
                put_rows(conn, namespace, encoded)
                return None

            return apply

        found: int | None = await self._prepared("put", prepare)
        return found

    async def _delete_rows(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        key: tuple[object, ...] = (self._namespace, thread)
        delete, bounds = DELETE_STEPS, list[object](key)
        if before_step is not None:
            delete += " AND step < ?"
            bounds.append(before_step)
        if cutoff_us is not None:
            delete += " AND ts_us < ?"
            bounds.append(cutoff_us)

        def apply(conn: sqlite3.Connection) -> int:
            removed: int = conn.execute(delete, bounds).rowcount
            if removed:
                conn.execute(DELETE_SUMMARY, key)
                conn.execute(REBUILD_SUMMARY, key)
            return removed

        removed: int = await self._write("prune", apply)
        return removed

    async def _read_step(self, thread: str, step: int | None) -> Decoded | None:
        key = (self._namespace, thread)
        sql, args = (GET_LATEST, key) if step is None else (GET_STEP, (*key, step))

        def read(conn: sqlite3.Connection) -> Decoded | None:
            rows = conn.execute(sql, args).fetchall()
            return self._decode_row(thread, rows[0]) if rows else None

        found: Decoded | None = await self._read("get", read)
        return found

    async def _read_history(
        self, thread: str, steps: StepRange
    ) -> AsyncIterator[StoredRow | Decoded]:
        """Stream in keyset batches, reading the next batch while this one is consumed.

        Rows are decoded one at a time as they are yielded, so only what the
        caller holds is alive as objects (a whole decoded batch costs more in
        garbage collection than the decoding itself); a payload over
        ``_DECODE_ON_LOOP_MAX`` bytes is decoded on the reader thread instead,
        so no single step stalls the event loop. No batch asks for more rows
        than are left to yield.
        """
        key = (self._namespace, thread)
        sql = HISTORY_NEWEST_FIRST if steps.newest_first else HISTORY
        left = steps.limit

        def batch(low: int, high: int, size: int) -> Callable[[sqlite3.Connection], list[Any]]:
            def read(conn: sqlite3.Connection) -> list[Any]:
                rows = conn.execute(sql, (*key, low, high, size)).fetchall()
                big = _DECODE_ON_LOOP_MAX
                return [
                    self._decode_row(thread, row) if len(row[2]) > big else StoredRow(*row)
                    for row in rows
                ]

            return read

        def size_of(left: int | None) -> int:
            return _HISTORY_BATCH if left is None else min(left, _HISTORY_BATCH)

        low, high = steps.after, _LAST_STEP if steps.before is None else steps.before - 1
        reader = self._started().reader
        pending: asyncio.Future[list[Any]] | None = None
        if low < high:  # steps low < step <= high
            pending = reader.submit(batch(low, high, size_of(left)))
        try:
            while pending is not None:
                asked = size_of(left)
                rows, pending = await pending, None
                if left is not None:
                    left -= len(rows)
                if len(rows) == asked and left != 0:
                    last = rows[-1].step
                    if steps.newest_first:
                        high = last - 1
                    else:
                        low = last
                    if low < high:
                        pending = reader.submit(batch(low, high, size_of(left)))
                for item in rows:
                    yield item
        finally:
            if pending is not None:
                pending.cancel()

    async def _read_steps(self, thread: str, steps: Sequence[int]) -> list[StoredRow | Decoded]:
        """One statement for every step asked for (a record's chain); payloads over
        ``_DECODE_ON_LOOP_MAX`` bytes are decoded on the reader thread."""
        args = (self._namespace, thread, json.dumps(list(steps)))

        def read(conn: sqlite3.Connection) -> list[StoredRow | Decoded]:
            rows = conn.execute(STEPS, args).fetchall()
            big = _DECODE_ON_LOOP_MAX
            return [
                self._decode_row(thread, row) if len(row[2]) > big else StoredRow(*row)
                for row in rows
            ]

        found: list[StoredRow | Decoded] = await self._read("get", read)
        return found

    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        sql, args = (
            (LIST_AFTER, (self._namespace, after, limit))
            if status is None
            else (LIST_STATUS_AFTER, (self._namespace, status, after, limit))
        )
        found: list[ThreadInfo] = await self._read(
            "list_threads", lambda conn: _summaries(conn.execute(sql, args))
        )
        return found

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        wake_us, thread = after if after is not None else (-(2**63), "")
        args = (self._namespace, now_us, wake_us, thread, limit)
        found: list[ThreadInfo] = await self._read(
            "list_due", lambda conn: _summaries(conn.execute(DUE, args))
        )
        return found

    async def _cursor_secret(self) -> bytes:
        def read(conn: sqlite3.Connection) -> Any:
            rows = conn.execute(READ_SECRET).fetchall()
            return rows[0][0] if rows else None

        secret = await self._read("cursor", read)
        if secret is None:
            fresh = os.urandom(SECRET_BYTES)
            await self._write("cursor", lambda conn: conn.execute(STORE_SECRET, (fresh,)))
            secret = await self._read("cursor", read)
        if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
            raise CheckpointCorrupted(f"{self.path}: the stored cursor secret is damaged")
        return secret
