"""A durable checkpointer on PostgreSQL, through asyncpg.

Three tables: the checkpoints (key ``(namespace, thread, step)``, so "latest" is
one backward index probe), a one-row-per-thread summary that listing pages by
keyset, written in the same statement or transaction as the checkpoints, and a
meta table recording the schema version. Payloads are the codec's bytes in
``BYTEA`` (lz4): ``JSONB`` measured slower both ways and refuses ``\\u0000`` in
strings, which agent state may hold (docs/postgres.md has the numbers). Table
names and statement text are in :mod:`~agentflow.checkpoint.postgres_sql`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import asyncpg  # type: ignore[import-untyped]

from agentflow.checkpoint.base import AsyncClosing, Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.codec import (
    decode,
    encode,
    parse_instant,
    validate_namespace,
    validate_step,
    validate_thread,
)
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.checkpoint.paging import check_page_args, check_prune_bounds
from agentflow.checkpoint.postgres_sql import LZ4_AVAILABLE, SETUP_LOCK_KEY, statements
from agentflow.checkpoint.redaction import redact_none
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    IncompatibleSchema,
    InvalidArgument,
    StoreUnavailable,
)

__all__ = ["SCHEMA_VERSION", "PostgresCheckpointer"]

_BACKEND = "postgres"

#: Version of the tables this module creates; a store recording a newer one is refused.
SCHEMA_VERSION = 1

#: History reads batches of about this many payload bytes, whatever the state size.
_HISTORY_BATCH_BYTES = 2 * 1024 * 1024
_HISTORY_FIRST_ROWS = 8
_HISTORY_MAX_ROWS = 1_024

_POOL_MAX_SIZE = 10
#: A kept connection idle longer than this is closed rather than reused, as
#: asyncpg's pool does (same default), so that a firewall or load balancer that
#: silently drops idle TCP connections costs a reconnect, not a failed call.
_KEEP_IDLE_SECONDS = 300.0


def _check_revision(if_revision: object) -> None:
    if isinstance(if_revision, bool) or not isinstance(if_revision, int):
        raise InvalidArgument(f"if_revision must be None or an int, got {if_revision!r}")
    if not 0 <= if_revision < 2**63:
        raise InvalidArgument(f"if_revision must be from 0 to 2**63-1, got {if_revision}")


#: Client-side failures that leave a connection unusable. InternalClientError is
#: what asyncpg raises when the server closed an idle connection it has not yet
#: noticed ("another operation is in progress").
_CLIENT_LOSS = (OSError, asyncpg.InterfaceError, asyncpg.InternalClientError)


def _lost_connection(exc: Exception) -> bool:
    if isinstance(exc, _CLIENT_LOSS):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return state.startswith(("08", "57P")) or state == "53300"


_DRIVER_ERRORS = (*_CLIENT_LOSS, asyncpg.PostgresError)


def _reraise(exc: Exception, action: str) -> NoReturn:
    """Raise the agentflow error for driver failure ``exc``, its root as the cause.

    Lost connections (client-side errors, SQLSTATE 08 and 57P, too many
    connections) are retryable; a server limit hit by the input (class 54, an
    index entry too large) is bad input, its statement rolled back.
    """
    # A transaction that lost its connection fails again in its rollback; the
    # loss itself is the context of that second error, and the news.
    context = exc.__context__
    if isinstance(context, Exception) and _lost_connection(context):
        exc = context
    state = getattr(exc, "sqlstate", None) or ""
    if _lost_connection(exc):
        raise StoreUnavailable(f"PostgreSQL connection failed during {action}: {exc}") from exc
    if state.startswith("54"):
        raise InvalidArgument(f"PostgreSQL refused the {action}: {exc}") from exc
    raise CheckpointError(f"PostgreSQL error during {action} ({state}): {exc}") from exc


async def _keep_session(conn: Any) -> None:
    """Skip asyncpg's reset query, a round trip per release: we leave no session
    state (SET, LISTEN, cursors, session locks). Transactions still roll back."""


class PostgresCheckpointer(AsyncClosing):
    """Checkpoints in PostgreSQL, safe under concurrent writers and processes.

    Pass a ``dsn`` or an existing asyncpg ``pool``; an injected pool stays the
    caller's (``close()`` leaves it open), one created here is closed by
    ``close()``. ``table`` (and optionally ``schema``) name the tables; they
    are created by :meth:`setup`, which also runs once on first use. A
    ``namespace`` confines every call to one tenant. ``redact`` masks values
    before they are stored (a redacted checkpoint cannot be resumed exactly).
    """

    def __init__(
        self,
        dsn: str = "postgresql://postgres@127.0.0.1:5432/test",
        *,
        pool: Any = None,
        table: str = "checkpoints",
        schema: str | None = None,
        redact: Redactor | None = None,
        namespace: str | None = None,
    ) -> None:
        names, self._sql = statements(table, schema)
        self._table, self._meta = names["cp"], names["meta"]
        self._ns = validate_namespace(namespace)
        self._redact = redact or redact_none
        self._dsn = dsn
        self._pool: Any = pool
        self._owns_pool = pool is None
        #: Connections of our own pool kept between calls (see _Lease).
        self._idle: list[tuple[Any, float]] = []
        self._waiting = 0
        self._ready = False
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"PostgresCheckpointer(table={self._table}, namespace={self._ns!r})"

    # -- lifecycle --------------------------------------------------------------

    async def close(self) -> None:
        """Close the pool if this checkpointer created it; idempotent."""
        pool, idle = self._pool, self._idle
        if self._owns_pool and pool is not None:
            self._pool, self._idle = None, []
            try:
                for conn, _ in idle:
                    await pool.release(conn)
            finally:
                await pool.close()

    async def setup(self) -> None:
        """Create the tables if absent and check the recorded schema version.

        Idempotent and safe from many processes at once: one transaction under
        a transaction-scoped advisory lock, which cannot outlive it on a pooled
        connection. A current version executes no DDL, so a role without
        CREATE privilege may run it once an owner has created the tables.
        """
        try:
            async with self._lock:
                await self._setup(await self._open_pool())
        except _DRIVER_ERRORS as exc:
            _reraise(exc, "setup")

    async def _open_pool(self) -> Any:
        """Call with ``self._lock`` held: creating the pool twice would leak one."""
        if self._pool is None:
            self._pool = await asyncpg.create_pool(
                self._dsn, min_size=1, max_size=_POOL_MAX_SIZE, reset=_keep_session
            )
        return self._pool

    async def _setup(self, pool: Any) -> None:
        sql = self._sql
        conn = await self._acquire(pool)
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", SETUP_LOCK_KEY)
                version = None
                if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", self._meta):
                    version = await conn.fetchval(sql["read_version"])
                if version is None:
                    await conn.execute(sql["create"])
                    if await conn.fetchval(LZ4_AVAILABLE):
                        await conn.execute(sql["use_lz4"])
                    await conn.execute(sql["record_version"], SCHEMA_VERSION)
                elif version > SCHEMA_VERSION:
                    raise IncompatibleSchema(
                        f"{self._table} has agentflow schema version {version}, newer than version"
                        f" {SCHEMA_VERSION} that this agentflow understands: upgrade agentflow"
                    )
        finally:
            await pool.release(conn)
        self._ready = True

    async def _pool_ready(self) -> Any:
        """The pool, with the schema checked once per checkpointer, not per call."""
        pool = self._pool
        if pool is not None and self._ready:
            return pool
        async with self._lock:
            pool = await self._open_pool()
            if not self._ready:
                await self._setup(pool)
        return pool

    async def _acquire(self, pool: Any) -> Any:
        """A kept connection, else one from the pool (every caller must use this:
        once all our connections are kept, ``pool.acquire()`` alone would wait forever)."""
        while self._idle:
            conn, since = self._idle.pop()
            if time.monotonic() - since < _KEEP_IDLE_SECONDS:
                return conn
            conn.terminate()
            await pool.release(conn)
        self._waiting += 1
        try:
            return await pool.acquire()
        finally:
            self._waiting -= 1

    async def _query(self, method: str, key: str, *args: Any) -> Any:
        """Run statement ``key`` of this namespace with ``conn.<method>``."""
        async with _Lease(self, key) as conn:
            return await getattr(conn, method)(self._sql[key], self._ns, *args)

    # -- writes -----------------------------------------------------------------

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        validate_thread(cp.thread)
        if if_revision is not None:
            _check_revision(if_revision)
        enc = encode(cp, self._redact)
        ns, thread, step = self._ns, enc.thread, enc.step
        args = (ns, thread, step, enc.ts_us, enc.interrupted, enc.done, enc.ts, enc.wake_at)
        async with _Lease(self, "put") as conn:
            if if_revision is None:
                await conn.fetchval(self._sql["put_upsert"], *args, enc.payload)
                return f"{thread}:{step}"
            if if_revision == 0:
                written = await conn.fetchval(self._sql["put_create"], *args, enc.payload)
            else:
                sql = self._sql["put_expected"]
                written = await conn.fetchval(sql, *args, enc.payload, if_revision)
            if written is not None:
                return f"{thread}:{step}"
            actual = await conn.fetchval(self._sql["revision"], ns, thread, step)
        raise CheckpointConflict(thread, step, if_revision, actual or 0)

    async def delete_thread(self, thread: str) -> None:
        await self._delete(validate_thread(thread), None, None, "delete_thread")

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        cutoff = parse_instant(older_than, what="older_than") if older_than is not None else None
        return await self._delete(validate_thread(thread), before_step, cutoff, "prune")

    async def _delete(
        self, thread: str, before_step: int | None, cutoff_us: int | None, action: str
    ) -> int:
        """Delete matching rows, then rebuild the thread's summary row.

        The summary row is locked only after the rows are deleted (the order
        ``put`` takes its locks in, so the two cannot deadlock), and rebuilt by
        a later statement whose snapshot therefore includes every ``put`` that
        touched the summary before us. A ``put`` still in flight moves the
        summary after we commit, through its own ``latest_step`` guard.
        """
        sql, ns = self._sql, self._ns
        async with _Lease(self, action) as conn, conn.transaction():
            deleted: int = await conn.fetchval(
                sql["delete_rows"], ns, thread, before_step, cutoff_us
            )
            if deleted:
                await conn.execute(sql["lock_summary"], ns, thread)
                await conn.execute(sql["rebuild_summary"], ns, thread)
        return deleted

    # -- reads ------------------------------------------------------------------

    @staticmethod
    def _decode(row: Any, thread: str) -> Checkpoint:
        step, revision, payload = row
        cp = decode(payload, revision)
        if cp.thread != thread or cp.step != step:
            raise CheckpointCorrupted(
                f"row ({thread!r}, {step}) holds the payload of ({cp.thread!r}, {cp.step})"
            )
        return cp

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        thread = validate_thread(thread)
        if step is not None:
            validate_step(step)
            row = await self._query("fetchrow", "get_step", thread, step)
        else:
            row = await self._query("fetchrow", "get_latest", thread)
        return None if row is None else self._decode(row, thread)

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        """Keyset batches of about 2 MiB of payload: memory stays bounded for
        5 MB states and round trips stay few for small ones, and no connection
        is held while the caller consumes a batch."""
        thread = validate_thread(thread)
        after, limit = -1, _HISTORY_FIRST_ROWS
        while True:
            rows = await self._query("fetch", "history", thread, after, limit)
            last_batch = len(rows) < limit
            if rows:
                after = rows[-1][0]
                average = max(1, sum(len(row[2]) for row in rows) // len(rows))
                limit = max(1, min(_HISTORY_MAX_ROWS, _HISTORY_BATCH_BYTES // average))
            for row in rows:
                yield self._decode(row, thread)
            if last_batch:
                return
            del rows  # never hold two batches while the next one is fetched

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        check_page_args(limit, offset)
        rows = await self._query("fetch", "list_offset", limit, offset)
        return [ThreadInfo(*row) for row in rows]

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        check_page_args(limit)
        # Thread ids are never empty, so "" sorts before every one of them.
        after = "" if cursor is None else decode_cursor(_BACKEND, self._ns, cursor)
        rows = await self._query("fetch", "list_after", after, limit + 1)
        infos = [ThreadInfo(*row) for row in rows[:limit]]
        last = infos[-1].thread if len(rows) > limit else None
        return ThreadPage(infos, None if last is None else encode_cursor(_BACKEND, self._ns, last))


class _Lease:
    """One call's connection, as ``async with``, with driver errors mapped.

    A connection of our own pool is kept between calls: asyncpg's release
    spawns a shielded task and costs a quarter of a put's client CPU. It goes
    back when a task waits for one, when the call failed or was cancelled
    (asyncpg then cleans it up), and on ``close()``. An injected pool gets
    every connection back at once. A class, because a generator-based context
    manager alone cost 26 µs a call.
    """

    __slots__ = ("_action", "_conn", "_owner", "_pool")

    def __init__(self, owner: PostgresCheckpointer, action: str) -> None:
        self._owner, self._action = owner, action

    async def __aenter__(self) -> Any:
        owner = self._owner
        try:
            pool = self._pool = await owner._pool_ready()
            self._conn = await owner._acquire(pool)
        except _DRIVER_ERRORS as exc:
            _reraise(exc, self._action)
        return self._conn

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        owner, pool = self._owner, self._pool
        if exc is None and owner._owns_pool and not owner._waiting and owner._pool is pool:
            owner._idle.append((self._conn, time.monotonic()))
            return
        try:
            await pool.release(self._conn)
        except _DRIVER_ERRORS as release_error:
            if exc is None:
                _reraise(release_error, self._action)
            # Otherwise the call's own failure below is the one worth raising.
        if isinstance(exc, _DRIVER_ERRORS):
            _reraise(exc, self._action)
