"""A durable checkpointer on PostgreSQL, through asyncpg.

Three tables: the checkpoints (key ``(namespace, thread, step)``, so "latest" is
one backward index probe), a one-row-per-thread summary that listings page by
keyset (by thread, by status and thread, or by wake instant), written in the
same statement or transaction as the checkpoints, and a meta table holding the
schema version and the cursor secret. Payloads are the codec's bytes in
``BYTEA`` (lz4): ``JSONB`` measured slower both ways and refuses ``\\u0000`` in
strings, which agent state may hold (docs/postgres.md has the numbers).
Statement text is in :mod:`~agentflow.checkpoint.postgres.sql`, setup and
migrations in :mod:`~agentflow.checkpoint.postgres.schema`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from agentflow.checkpoint.backend import CheckpointerBase, EncodedCheckpoint, StoredRow
from agentflow.checkpoint.base import Checkpoint, Redactor, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.postgres.connections import KeptConnections
from agentflow.checkpoint.postgres.driver_errors import address_of, driver_error
from agentflow.checkpoint.postgres.schema import prepare
from agentflow.checkpoint.postgres.sql import statements
from agentflow.errors import AgentflowError, CheckpointCorrupted

__all__ = ["DEFAULT_DSN", "PostgresCheckpointer", "from_url"]

DEFAULT_DSN: Final = "postgresql://postgres@127.0.0.1:5432/test"

#: History reads batches of about this many payload bytes, whatever the state size.
_HISTORY_BATCH_BYTES: Final = 2 * 1024 * 1024
_HISTORY_FIRST_ROWS: Final = 8
_HISTORY_MAX_ROWS: Final = 1_024
#: Sorts before every stored wake instant: where the first page of list_due starts.
_BEFORE_ANY_WAKE: Final = (-(2**63), "")


class PostgresCheckpointer(CheckpointerBase):
    """Checkpoints in PostgreSQL, safe under concurrent writers and processes.

    Pass a ``dsn`` or an existing asyncpg ``pool``; an injected pool stays the
    caller's (``close()`` leaves it open), one created here is closed by
    ``close()``. ``table`` (and optionally ``schema``) name the tables; they
    are created, or migrated from an older version, by :meth:`setup`, which
    also runs once on first use. A ``namespace`` confines every call to one
    tenant; ``redact`` masks values before they are stored; ``codec`` turns
    checkpoints into the stored bytes (JSON by default). With ``create=False``
    missing tables raise :class:`~agentflow.errors.StoreNotFound` on the first
    call and nothing is created.
    """

    kind = "postgres"

    def __init__(
        self,
        dsn: str = DEFAULT_DSN,
        *,
        pool: Any = None,
        table: str = "checkpoints",
        schema: str | None = None,
        redact: Redactor | None = None,
        namespace: str | None = None,
        codec: CheckpointCodec | None = None,
        create: bool = True,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec)
        self._may_create = bool(create)
        names, self._sql = statements(table, schema)
        self._table, self._meta = names["cp"], names["meta"]
        self._where = address_of(dsn, pool)
        self._connections = KeptConnections(dsn, pool, self._prepare)

    def __repr__(self) -> str:
        return f"PostgresCheckpointer(table={self._table}, namespace={self.namespace!r})"

    async def setup(self) -> None:
        """Create the tables if absent, migrate a store of an older version, and
        refuse one of a newer version (:class:`~agentflow.errors.IncompatibleSchema`).

        Idempotent and safe from many processes at once. A current version
        executes no DDL, so a role without CREATE privilege may run it once an
        owner has created the tables.
        """
        self._check_open()
        try:
            await self._connections.setup()
        except Exception as exc:
            self._reraise(exc, "setup")

    async def _prepare(self, conn: Any) -> None:
        await prepare(conn, self._sql, self._meta, self._table, create=self._may_create)

    async def _query(self, method: str, key: str, *args: Any) -> Any:
        """Run statement ``key`` of this namespace with ``conn.<method>``."""
        async with self._connections.lease() as conn:
            return await getattr(conn, method)(self._sql[key], self._namespace, *args)

    # -- writes -----------------------------------------------------------------

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        enc, sql, ns = encode(), self._sql, self._namespace
        columns = (enc.ts_us, enc.interrupted, enc.done, enc.ts, enc.wake_at, enc.payload)
        args = (ns, thread, step, *columns, enc.wake_us)
        async with self._connections.lease() as conn:
            if if_revision is None:
                await conn.fetchval(sql["put_upsert"], *args)
                return None
            if if_revision == 0:
                written = await conn.fetchval(sql["put_create"], *args)
            else:
                written = await conn.fetchval(sql["put_expected"], *args, if_revision)
            if written is not None:
                return None
            # Only a lost compare-and-set pays a second round trip, for its message.
            actual: int | None = await conn.fetchval(sql["revision"], ns, thread, step)
        return actual or 0

    async def _delete_steps(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        """Delete matching rows, then rebuild the thread's summary row.

        The summary row is locked only after the rows are deleted (the order
        a put takes its locks in, so the two cannot deadlock), and rebuilt by
        a later statement whose snapshot therefore includes every put that
        touched the summary before us. A put still in flight moves the
        summary after we commit, through its own ``latest_step`` guard.
        """
        sql, ns = self._sql, self._namespace
        async with self._connections.lease() as conn, conn.transaction():
            deleted: int = await conn.fetchval(
                sql["delete_rows"], ns, thread, before_step, cutoff_us
            )
            if deleted:
                await conn.execute(sql["lock_summary"], ns, thread)
                await conn.execute(sql["rebuild_summary"], ns, thread)
        return deleted

    # -- reads ------------------------------------------------------------------

    async def _read_step(self, thread: str, step: int | None) -> StoredRow | None:
        if step is None:
            row = await self._query("fetchrow", "get_latest", thread)
        else:
            row = await self._query("fetchrow", "get_step", thread, step)
        return None if row is None else StoredRow(*row)

    async def _read_history(self, thread: str) -> AsyncIterator[Checkpoint]:
        """Keyset batches of about 2 MiB of payload: memory stays bounded for
        5 MB states and round trips stay few for small ones, and no connection
        is held while the caller consumes a batch. Rows are decoded here, from
        asyncpg's records, sparing a StoredRow per row."""
        after, limit = -1, _HISTORY_FIRST_ROWS
        while True:
            rows = await self._query("fetch", "history", thread, after, limit)
            last_batch = len(rows) < limit
            if rows:
                after = rows[-1][0]
                average = max(1, sum(len(row[2]) for row in rows) // len(rows))
                limit = max(1, min(_HISTORY_MAX_ROWS, _HISTORY_BATCH_BYTES // average))
            for row in rows:
                yield self._decode_row(thread, row)
            if last_batch:
                return
            del rows  # never hold two batches while the next one is fetched

    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        if status is None:
            rows = await self._query("fetch", "list_after", after, limit)
        else:
            rows = await self._query("fetch", "list_status_after", after, limit, status)
        return [ThreadInfo(*row) for row in rows]

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        wake_us, thread = after or _BEFORE_ANY_WAKE
        rows = await self._query("fetch", "list_due", now_us, wake_us, thread, limit)
        return [ThreadInfo(*row) for row in rows]

    # -- cursors, errors, lifecycle -----------------------------------------------

    async def _cursor_secret(self) -> bytes:
        async with self._connections.lease() as conn:
            secret = await conn.fetchval(self._sql["cursor_secret"], os.urandom(SECRET_BYTES))
        if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
            raise CheckpointCorrupted(f"the cursor secret in {self._meta} is damaged")
        return secret

    # The base reads the cursor secret outside its error mapping: map it here.
    def _driver_error(self, exc: Exception, operation: str) -> AgentflowError | None:
        return driver_error(exc, operation, self._where)

    async def _close_store(self) -> None:
        await self._connections.close()


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    codec: CheckpointCodec | None = None,
    create: bool = True,
) -> PostgresCheckpointer:
    """``postgresql://user@host:port/db`` (or ``postgres://``): the URL is asyncpg's DSN."""
    return PostgresCheckpointer(url, namespace=namespace, codec=codec, create=create)
