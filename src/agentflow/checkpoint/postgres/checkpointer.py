"""A PostgreSQL store, through asyncpg: a thread's checkpoints, record and events.

The checkpoints are a table keyed ``(namespace, thread, step)`` (so "latest" is
one backward index probe) and a one-row-per-thread summary that listings page
by keyset (by thread, by effective status and thread, or by wake instant),
written in the same statement as the checkpoints. Records and events are the
durable tables beside them (:mod:`~agentflow.checkpoint.postgres.runs`,
:mod:`~agentflow.checkpoint.postgres.events`); every record write sets the
summary's run status in its own statement. A meta table holds the one schema
version and the cursor secret (:mod:`~agentflow.checkpoint.postgres.schema`).
Payloads are the codec's bytes in ``BYTEA`` (lz4): ``JSONB`` measured slower
both ways and refuses ``\\u0000`` in strings, which agent state may hold.

All three parts share one pool. A step's commit (checkpoint, receipts and
record progress) is one statement, so one transaction commit; a thread's
delete is one transaction.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import asyncpg

from agentflow.checkpoint.backend import Decoded, EncodedCheckpoint, StepRange, StoredRow
from agentflow.checkpoint.base import Redactor, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.plans import Write
from agentflow.checkpoint.postgres.connections import KeptConnections
from agentflow.checkpoint.postgres.driver_errors import address_of, driver_error
from agentflow.checkpoint.postgres.events import PostgresEvents
from agentflow.checkpoint.postgres.fleet import PostgresFleet
from agentflow.checkpoint.postgres.outbox import deliver_in
from agentflow.checkpoint.postgres.rows import decode_run, row_params, step_params, write_params
from agentflow.checkpoint.postgres.runs import PostgresRuns
from agentflow.checkpoint.postgres.runs_sql import Statement, Statements
from agentflow.checkpoint.postgres.schema import prepare
from agentflow.checkpoint.store_base import RUN_STATUSES, StoreBase
from agentflow.durable.errors import ClaimActive, DurableConflict
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.errors import AgentflowError, CheckpointCorrupted

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["DEFAULT_DSN", "PostgresCheckpointer", "from_url"]

DEFAULT_DSN: Final = "postgresql://postgres@127.0.0.1:5432/test"

#: History reads batches of about this many payload bytes, whatever the state size.
_HISTORY_BATCH_BYTES: Final = 2 * 1024 * 1024
_HISTORY_FIRST_ROWS: Final = 8
_HISTORY_MAX_ROWS: Final = 1_024
#: The highest step a row can have (steps are BIGINT).
_LAST_STEP: Final = 2**63 - 1
#: Sorts before every stored wake instant: where the first page of list_due starts.
_BEFORE_ANY_WAKE: Final = (-(2**63), "")
_RUN_STATUSES: Final = frozenset({None, *RUN_STATUSES.values()})


def _info(row: Any) -> ThreadInfo:
    """A summary row as ThreadInfo; a run status no record write sets is damage."""
    if row[6] not in _RUN_STATUSES:
        raise CheckpointCorrupted(f"thread {row[0]!r}: the stored run status is damaged")
    return ThreadInfo(*row)


class _RecordExists(Exception):
    """Rolls back a run's start whose record was there first (its step with it)."""


class PostgresCheckpointer(PostgresRuns, PostgresEvents, PostgresFleet, StoreBase):
    """A thread's checkpoints, record and events in PostgreSQL (a Store), safe
    under concurrent writers and processes.

    Pass a ``dsn`` or an existing asyncpg ``pool``; an injected pool stays the
    caller's (``close()`` leaves it open), one created here is closed by
    ``close()``. ``table`` (and optionally ``schema``) name the tables; they
    are created, or migrated from an older version, by :meth:`setup`, which
    also runs once on first use. A ``namespace`` confines every call to one
    tenant; ``redact`` masks values before they are stored; ``codec`` turns
    checkpoints into the stored bytes (JSON by default); ``sealing`` (a
    :class:`~agentflow.checkpoint.sealing.KeyRing`) seals checkpoints, records
    and events. With ``create=False`` missing tables raise
    :class:`~agentflow.errors.StoreNotFound` on the first call and nothing is
    created.
    """

    kind = "postgres"
    delivers_in_step = True

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
        sealing: KeyRing | None = None,
        create: bool = True,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec, sealing=sealing)
        self._may_create = bool(create)
        self._sql = Statements(table, schema)
        self._table, self._meta = self._sql.names["cp"], self._sql.names["meta"]
        self._where, database = address_of(dsn, pool)
        qualified = table if schema is None else f"{schema}.{table}"
        self._database = f"postgresql://{database}?table={qualified}"
        self._connections = KeptConnections(dsn, pool, self._prepare)

    def __repr__(self) -> str:
        return f"PostgresCheckpointer(table={self._table}, namespace={self.namespace!r})"

    @property
    def database(self) -> str:
        return self._database

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
        await prepare(conn, self._sql.names, create=self._may_create)

    async def _query(self, method: str, key: str, *args: Any) -> Any:
        """Run checkpoint statement ``key`` of this namespace with ``conn.<method>``."""
        async with self._connections.lease() as conn:
            return await getattr(conn, method)(self._sql.cp[key], self._namespace, *args)

    async def _fetch(
        self, operation: str, method: str, statement: str | Statement, params: dict[str, Any]
    ) -> Any:
        self._check_open()
        if isinstance(statement, str):
            statement = self._sql.runs[statement]
        try:
            async with self._connections.lease() as conn:
                return await getattr(conn, method)(statement.text, *statement.args(params))
        except Exception as exc:
            self._reraise(exc, operation)

    # -- checkpoint writes --------------------------------------------------------

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        enc, sql, ns = encode(), self._sql.cp, self._namespace
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

    async def _rebuild_summary(self, conn: Any, thread: str) -> None:
        """Rebuild ``thread``'s summary after its rows were deleted, in that transaction.

        The summary row is locked only after the rows are deleted (the order
        a put takes its locks in, so the two cannot deadlock), and rebuilt by
        a later statement whose snapshot therefore includes every put that
        touched the summary before us. A put still in flight moves the
        summary after we commit, through its own ``latest_step`` guard.
        """
        await conn.execute(self._sql.cp["lock_summary"], self._namespace, thread)
        await conn.execute(self._sql.cp["rebuild_summary"], self._namespace, thread)

    async def _delete_rows(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        delete = self._sql.cp["delete_rows"]
        async with self._connections.lease() as conn, conn.transaction():
            deleted: int = await conn.fetchval(
                delete, self._namespace, thread, before_step, cutoff_us
            )
            if deleted:
                await self._rebuild_summary(conn, thread)
        return deleted

    # -- the operations across parts ------------------------------------------------

    async def _commit_step(
        self, thread: str, step: int, encode: Callable[[], EncodedCheckpoint], write: Write
    ) -> tuple[int | None, DurableCheckpoint]:
        """The record write and the step's put as one statement, so one commit (with
        the events pending after it appended and recorded delivered: one transaction).

        The head's guard also requires the step to be absent, so a refused
        guard or an existing step writes nothing; a put racing in after the
        statement's snapshot fails its insert, which rolls the whole statement
        back, and is reported as the conflict it is.
        """
        shape, params = write_params(self._namespace, write, step=True)
        params.update(step_params(encode()))
        statement = self._sql.write(shape)
        delivery = await self._delivery("commit_step", write.record)
        record = write.record
        async with self._connections.lease() as conn:
            try:
                async with conn.transaction() if delivery else contextlib.nullcontext():
                    applied, lease, found = await conn.fetchrow(
                        statement.text, *statement.args(params)
                    )
                    if delivery and applied and found is None:
                        record = await deliver_in(
                            conn, self._sql, self._namespace, record, delivery
                        )
            except asyncpg.UniqueViolationError:
                found = await conn.fetchval(self._sql.cp["revision"], self._namespace, thread, step)
                if found is None:
                    raise DurableConflict("a racing put neither held nor left") from None
                return found, write.record
        if found is not None:
            return found, write.record
        if not applied:
            raise await self._refusal("commit_step", write)
        return None, replace(record, lease_expires_at_ms=lease)

    async def _start_run(
        self,
        thread: str,
        encode: Callable[[], EncodedCheckpoint],
        checkpoint: DurableCheckpoint,
        claim_token: str,
        lease_ms: int,
    ) -> tuple[int | None, DurableCheckpoint | None]:
        """The step's put, the record's insert, its claim and the delivery of its
        pending events in one transaction: one commit, nothing written when the step
        or a record was there first."""
        enc, sql, ns = encode(), self._sql.cp, self._namespace
        row = self._parts.encode_row(checkpoint)
        columns = (enc.ts_us, enc.interrupted, enc.done, enc.ts, enc.wake_at, enc.payload)
        create, claim = self._sql.runs["create"], self._sql.runs["claim"]
        claim_params = {
            **self._run(thread),
            "cycle_index": checkpoint.cycle_index + 1,
            "claim_token": claim_token,
            "lease_ms": lease_ms,
            "recovery": 0,
        }
        delivery = await self._delivery("start_run", checkpoint)
        done = None
        try:
            async with self._connections.lease() as conn, conn.transaction():
                put = (ns, thread, 0, *columns, enc.wake_us)
                if await conn.fetchval(sql["put_create"], *put) is None:
                    return (await conn.fetchval(sql["revision"], ns, thread, 0)) or 0, None
                params = row_params(ns, row, checkpoint.run_definition_digest)
                if not await conn.fetchval(create.text, *create.args(params)):
                    raise _RecordExists
                _now, _seen, *claimed = await conn.fetchrow(claim.text, *claim.args(claim_params))
                if delivery is not None:
                    done = await deliver_in(conn, self._sql, ns, checkpoint, delivery)
        except _RecordExists:
            return None, None
        started = decode_run(self._parts, thread, claimed)
        if done is None:
            return None, started
        # the claim read the record before its events were delivered
        return None, replace(
            started, event_outbox=done.event_outbox, event_cursor=done.event_cursor
        )

    async def _delete_thread(self, thread: str, force: bool) -> bool:
        """Record (refused on a live lease), events, steps and summary in one transaction."""
        statement = self._sql.runs["delete_thread"]
        params = {"namespace": self._namespace, "key": thread, "force": force}
        async with self._connections.lease() as conn, conn.transaction():
            live, record, steps = await conn.fetchrow(statement.text, *statement.args(params))
            if live:
                raise ClaimActive(f"run {thread!r} is held by a live lease; delete it with force")
            if record or steps:
                await self._rebuild_summary(conn, thread)
        return bool(record or steps)

    # -- checkpoint reads -------------------------------------------------------------

    async def _read_step(self, thread: str, step: int | None) -> StoredRow | None:
        if step is None:
            row = await self._query("fetchrow", "get_latest", thread)
        else:
            row = await self._query("fetchrow", "get_step", thread, step)
        return None if row is None else StoredRow(*row)

    async def _read_history(self, thread: str, steps: StepRange) -> AsyncIterator[Decoded]:
        """Keyset batches of about 2 MiB of payload: memory stays bounded for
        5 MB states and round trips stay few for small ones, and no connection
        is held while the caller consumes a batch; no batch asks for more rows
        than are left to yield. Rows are decoded here, from asyncpg's records,
        sparing a StoredRow per row."""
        statement = "history_newest_first" if steps.newest_first else "history"
        low, high = steps.after, _LAST_STEP if steps.before is None else steps.before - 1
        size, left = _HISTORY_FIRST_ROWS, steps.limit
        while low < high:
            asked = size if left is None else min(size, left)
            rows = await self._query("fetch", statement, thread, low, high, asked)
            if rows:
                if steps.newest_first:
                    high = rows[-1][0] - 1
                else:
                    low = rows[-1][0]
                average = max(1, sum(len(row[2]) for row in rows) // len(rows))
                size = max(1, min(_HISTORY_MAX_ROWS, _HISTORY_BATCH_BYTES // average))
            if left is not None:
                left -= len(rows)
            for row in rows:
                yield self._decode_row(thread, row)
            if len(rows) < asked or left == 0:
                return
            del rows  # never hold two batches while the next one is fetched

    async def _read_steps(self, thread: str, steps: Sequence[int]) -> list[Decoded]:
        """One statement for every step asked for (a record's chain)."""
        rows = await self._query("fetch", "steps", thread, list(steps))
        return [self._decode_row(thread, row) for row in rows]

    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        if status is None:
            rows = await self._query("fetch", "list_after", after, limit)
        else:
            rows = await self._query("fetch", "list_status_after", after, limit, status)
        return [_info(row) for row in rows]

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        wake_us, thread = after or _BEFORE_ANY_WAKE
        rows = await self._query("fetch", "list_due", now_us, wake_us, thread, limit)
        return [_info(row) for row in rows]

    # -- cursors, errors, lifecycle -----------------------------------------------

    async def _cursor_secret(self) -> bytes:
        async with self._connections.lease() as conn:
            secret = await conn.fetchval(self._sql.cp["cursor_secret"], os.urandom(SECRET_BYTES))
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
    sealing: KeyRing | None = None,
    create: bool = True,
) -> PostgresCheckpointer:
    """``postgresql://user@host:port/db`` (or ``postgres://``): the URL is asyncpg's DSN."""
    return PostgresCheckpointer(
        url, namespace=namespace, codec=codec, sealing=sealing, create=create
    )
