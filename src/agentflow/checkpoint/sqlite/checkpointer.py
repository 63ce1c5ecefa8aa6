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

The threads live in :mod:`~agentflow.checkpoint.sqlite_workers`, the tables, SQL
text and opening of a file in :mod:`~agentflow.checkpoint.sqlite_schema`.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
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
from agentflow.checkpoint.sqlite_schema import (
    GET_LATEST,
    GET_STEP,
    HISTORY,
    KEY,
    LIST_AFTER,
    LIST_OFFSET,
    REBUILD_SUMMARY,
    REVISION,
    SCHEMA_VERSION,
    UPSERT,
    UPSERT_SUMMARY,
)
from agentflow.checkpoint.sqlite_workers import Pair, PairKey, acquire_pair, release_pair
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
)

__all__ = ["SCHEMA_VERSION", "SYNCHRONOUS_MODES", "SqliteCheckpointer"]

#: Accepted values of ``synchronous``, weakest to strongest (SQLite's PRAGMA).
SYNCHRONOUS_MODES: Final = ("OFF", "NORMAL", "FULL", "EXTRA")

_BACKEND: Final = "sqlite"
#: Rows per history read: bounds memory while keeping thread hops rare.
_HISTORY_BATCH: Final = 256
#: History payloads above this are decoded on the reader thread, smaller ones as yielded.
_DECODE_ON_LOOP_MAX: Final = 64 * 1024
#: SQLite's default SQLITE_MAX_LENGTH: a larger payload would fail its whole group.
_MAX_PAYLOAD: Final = 1_000_000_000


def _put_rows(
    conn: sqlite3.Connection, namespace: str, cp: EncodedCheckpoint, if_revision: int | None
) -> str:
    if if_revision is not None:
        rows = conn.execute(REVISION, (namespace, cp.thread, cp.step)).fetchall()
        current = rows[0][0] if rows else 0
        if current != if_revision:
            raise CheckpointConflict(cp.thread, cp.step, if_revision, current)
    key, status = (namespace, cp.thread, cp.step), (cp.interrupted, cp.done)
    conn.execute(UPSERT, (*key, cp.ts_us, cp.ts, *status, cp.wake_at, cp.payload))
    conn.execute(UPSERT_SUMMARY, (*key, *status, cp.ts, cp.wake_at))
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
        self._namespace = validate_namespace(namespace)
        self._key: PairKey = (os.path.abspath(self.path), mode, self._busy_timeout)
        self._pair: Pair | None = None
        self._closed = False

    async def close(self) -> None:
        """Finish queued writes, then close both connections and stop both threads
        (unless another open checkpointer on the same file still uses them)."""
        if self._closed:
            return
        self._closed = True
        pair, self._pair = self._pair, None
        if pair is not None:
            await release_pair(self._key, pair)

    def _started(self) -> Pair:
        pair = self._pair
        if pair is None:
            if self._closed:
                raise CheckpointError("the SqliteCheckpointer is closed")
            pair = self._pair = acquire_pair(self._key)
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
        validate_thread(cp.thread)
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
        key = (self._namespace, validate_thread(thread))

        def apply(conn: sqlite3.Connection) -> None:
            conn.execute(f"DELETE FROM agentflow_checkpoints WHERE {KEY}", key)
            conn.execute(f"DELETE FROM agentflow_threads WHERE {KEY}", key)

        await self._write(lambda: apply)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        key: tuple[object, ...] = (self._namespace, validate_thread(thread))
        delete, bounds = f"DELETE FROM agentflow_checkpoints WHERE {KEY}", list[object](key)
        if before_step is not None:
            delete += " AND step < ?"
            bounds.append(before_step)
        if older_than is not None:
            delete += " AND ts_us < ?"
            bounds.append(parse_instant(older_than, what="older_than"))

        def apply(conn: sqlite3.Connection) -> int:
            removed: int = conn.execute(delete, bounds).rowcount
            if removed:
                conn.execute(f"DELETE FROM agentflow_threads WHERE {KEY}", key)
                conn.execute(REBUILD_SUMMARY, key)
            return removed

        result: int = await self._write(lambda: apply)
        return result

    # -- reads -------------------------------------------------------------

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        key = (self._namespace, validate_thread(thread))
        sql, args = (GET_LATEST, key) if step is None else (GET_STEP, (*key, validate_step(step)))

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
        key = (self._namespace, validate_thread(thread))

        def batch_after(after: int) -> Callable[[sqlite3.Connection], list[Any]]:
            def read(conn: sqlite3.Connection) -> list[Any]:
                rows = conn.execute(HISTORY, (*key, after, _HISTORY_BATCH)).fetchall()
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
        return await self._summaries(LIST_OFFSET, (self._namespace, limit, offset))

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        check_page_args(limit)
        after = "" if cursor is None else decode_cursor(_BACKEND, self._namespace, cursor)
        infos = await self._summaries(LIST_AFTER, (self._namespace, after, limit + 1))
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
