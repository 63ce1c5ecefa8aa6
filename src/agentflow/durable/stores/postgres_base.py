"""What the PostgreSQL durable stores share: the checkpointer's connections, setup and errors.

A store takes the checkpointer's arguments (a DSN or an injected asyncpg
pool, ``table`` and ``schema``) and keeps its connections between calls
through the checkpointer's :class:`~agentflow.checkpoint.postgres.connections.KeptConnections`;
an injected pool stays the caller's. Its first use runs the checkpointer's
setup and then creates the durable tables, in one transaction under the
checkpointer's advisory lock, so processes starting at once create them
exactly once; the version is recorded in the checkpointer's meta table
(component ``durable``), a newer one is refused. Driver errors become
agentflow's through the checkpointer's mapping, naming the public call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentflow.checkpoint.postgres import DEFAULT_DSN
from agentflow.checkpoint.postgres.connections import KeptConnections
from agentflow.checkpoint.postgres.driver_errors import address_of, driver_error
from agentflow.checkpoint.postgres.schema import prepare
from agentflow.checkpoint.postgres.sql import LZ4_AVAILABLE, SETUP_LOCK_KEY
from agentflow.checkpoint.validation import validate_namespace
from agentflow.durable.lifecycle import ClosingStore
from agentflow.durable.stores.postgres_sql import DURABLE_SCHEMA_VERSION, DurableSql, Statement
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    IncompatibleSchema,
    StoreClosed,
    StoreNotFound,
)

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["PostgresDurableBase", "check_schema", "ensure_schema"]

T = TypeVar("T")


async def ensure_schema(conn: Any, sql: DurableSql) -> None:
    """Create the checkpointer's and the durable tables if absent; refuse a newer version.

    A current version executes no DDL, so a role without CREATE privilege
    may use the store once an owner created the tables.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", SETUP_LOCK_KEY)
        await prepare(conn, sql.checkpoint_sql, sql.names["meta"], sql.table)
        version = await conn.fetchval(sql.fixed["read_version"].text)
        if version is None:
            await conn.execute(sql.create)
            if await conn.fetchval(LZ4_AVAILABLE):
                await conn.execute(sql.use_lz4)
            await conn.execute(sql.fixed["record_version"].text, DURABLE_SCHEMA_VERSION)
            return
        _check_version(version, sql)


async def check_schema(conn: Any, sql: DurableSql) -> None:
    """Refuse a database without the durable tables, creating nothing."""
    version = None
    if await conn.fetchval("SELECT to_regclass($1)", sql.names["meta"]) is not None:
        version = await conn.fetchval(sql.fixed["read_version"].text)
    if version is None:
        raise StoreNotFound(f"{sql.table} has no durable tables")
    _check_version(version, sql)


def _check_version(version: object, sql: DurableSql) -> None:
    if version == DURABLE_SCHEMA_VERSION:
        return
    if isinstance(version, int) and version > DURABLE_SCHEMA_VERSION:
        raise IncompatibleSchema(
            f"{sql.table} has durable schema version {version}, newer than version "
            f"{DURABLE_SCHEMA_VERSION} that this agentflow understands; upgrade agentflow"
        )
    raise CheckpointCorrupted(f"{sql.table} holds an invalid durable schema version {version!r}")


class PostgresDurableBase(ClosingStore):
    """Namespace, statements, connections and lifecycle of a PostgreSQL durable store.

    ``dsn`` or ``pool``, ``table`` and ``schema`` are those of
    :class:`~agentflow.checkpoint.postgres.PostgresCheckpointer`; the durable
    tables are ``<table>_durable_*`` beside the checkpointer's. Stores given
    one pool share its connections. With ``create=False`` a database without
    the durable tables raises :class:`~agentflow.errors.StoreNotFound` and
    gets none.
    """

    def __init__(
        self,
        dsn: str = DEFAULT_DSN,
        *,
        pool: Any = None,
        table: str = "checkpoints",
        schema: str | None = None,
        namespace: str | None = None,
        create: bool = True,
        sealing: KeyRing | None = None,
    ) -> None:
        self._namespace = validate_namespace(namespace)
        self._sealing = sealing
        self._sql = DurableSql(table, schema)
        self._may_create = create
        self._where = address_of(dsn, pool)
        self._connections = KeptConnections(dsn, pool, self._prepare)
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(table={self._sql.table}, namespace={self._namespace!r})"

    @property
    def namespace(self) -> str:
        """The tenant this store reads and writes ("" for the default one)."""
        return self._namespace

    async def _prepare(self, conn: Any) -> None:
        if self._may_create:
            await ensure_schema(conn, self._sql)
        else:
            await check_schema(conn, self._sql)

    async def _call(self, operation: str, run: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``run`` on a kept connection; driver errors become agentflow's."""
        if self._closed:
            raise StoreClosed(f"this {type(self).__name__} is closed")
        try:
            async with self._connections.lease() as conn:
                return await run(conn)
        except AgentflowError:
            raise
        except Exception as exc:
            error = driver_error(exc, operation, self._where)
            if error is None:
                raise
            raise error from exc

    async def _query(
        self, operation: str, method: str, statement: Statement, params: dict[str, Any]
    ) -> Any:
        """``conn.<method>`` (``fetch``, ``fetchrow``, ``fetchval``) of one statement."""
        args = statement.args(params)
        return await self._call(
            operation, lambda conn: getattr(conn, method)(statement.text, *args)
        )

    async def _fixed(self, operation: str, method: str, name: str, params: dict[str, Any]) -> Any:
        return await self._query(operation, method, self._sql.fixed[name], params)

    async def close(self) -> None:
        """Release connections (an injected pool stays open); safe to call twice."""
        self._closed = True
        await self._connections.close()
