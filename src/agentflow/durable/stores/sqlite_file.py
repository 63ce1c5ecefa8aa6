"""A durable store's share of a SQLite file: the checkpointer's writer and reader.

Every store on a file (durable runs, events, and the checkpointers) uses the
same two threads and connections of
:mod:`agentflow.checkpoint.sqlite.workers`, so a run's record and its
checkpoints go through one writer and join one group commit. A write job runs
inside the writer's transaction: its guard is decided there, under SQLite's
write lock, and a refusal is a result it returns, never an exception (an
exception would roll back every write of the group).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.sqlite.workers import Pair, acquire_pair, release_pair
from agentflow.checkpoint.validation import validate_namespace
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.lifecycle import ClosingStore
from agentflow.durable.stores.sqlite_sql import (
    DURABLE_SCHEMA_VERSION,
    READ_VERSION,
    ensure_schema,
)
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    CheckpointError,
    IncompatibleSchema,
    StoreClosed,
    StoreNotFound,
)

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["SqliteFile", "SqliteFileStore"]

T = TypeVar("T")

#: ``RETURNING`` (3.35), ``iif`` (3.32) and STRICT tables (3.37).
_MIN_SQLITE: Final = (3, 37, 0)
#: How sqlite3 reports a TEXT value that is not UTF-8 (a damaged journal column).
_NOT_UTF8: Final = "Could not decode to UTF-8"
_HAS_META: Final = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentflow_meta'"


class SqliteFile:
    """One store's handle on the shared writer and reader of a file.

    Takes the checkpointer's arguments and checks them as it does; the pair
    of threads is acquired on first use and released by :meth:`close`. The
    first use also checks the durable tables' version, creating them in a
    file that has none (unless ``create`` is false: then a missing file or
    tables raise :class:`~agentflow.errors.StoreNotFound`, and the file is
    only read) and refusing a newer one.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str,
        busy_timeout: float,
        secure_permissions: bool,
        owner: str,
        create: bool,
    ) -> None:
        # An unopened checkpointer of the same file: its argument checks, its
        # pair key (so both share threads) and its driver-error mapping.
        self._checkpointer = SqliteCheckpointer(
            path,
            synchronous=synchronous,
            busy_timeout=busy_timeout,
            secure_permissions=secure_permissions,
        )
        self.path = self._checkpointer.path
        self.key = self._checkpointer._key
        self._owner = owner
        self._may_create = create
        self._pair: Pair | None = None
        self._schema_checked = False
        self._closed = False

    async def write(self, operation: str, apply: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``apply`` in the writer's next transaction; driver errors become agentflow's."""
        pair = await self._ready(operation)
        result: T = await self._submit(operation, lambda: pair.writer.submit(lambda: apply))
        return result

    async def read(self, operation: str, read: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``read`` on the reader's connection (it sees committed writes only)."""
        pair = await self._ready(operation)
        result: T = await self._submit(operation, lambda: pair.reader.submit(read))
        return result

    async def close(self) -> None:
        """Release this store's use of the threads; safe to call twice."""
        self._closed = True
        pair, self._pair = self._pair, None
        if pair is not None:
            await release_pair(self.key, pair)

    async def _submit(self, operation: str, job: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await job()
        except AgentflowError:
            raise
        except Exception as exc:
            if isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(_NOT_UTF8):
                # sqlite3's message quotes the column's text: stored data stays out of errors
                raise DurableCorrupted(
                    "checkpoint_row_invalid",
                    f"sqlite {operation}: a stored text column is not UTF-8 (damaged)",
                ) from None
            error = self._checkpointer._driver_error(exc, operation)
            if error is None:
                raise
            raise error from exc
        return result

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"this {self._owner} is closed")

    async def _ready(self, operation: str) -> Pair:
        self._check_open()
        pair = self._pair
        if pair is None:
            if sqlite3.sqlite_version_info < _MIN_SQLITE:
                raise CheckpointError(
                    f"the durable store needs SQLite {'.'.join(map(str, _MIN_SQLITE))} or newer,"
                    f" this Python has {sqlite3.sqlite_version}"
                )
            if not self._may_create:
                self._check_version(await asyncio.to_thread(_existing_version, self.path))
            pair = self._pair = acquire_pair(self.key)
        if not self._schema_checked:
            version = await self._submit(operation, lambda: pair.reader.submit(_version))
            if version != DURABLE_SCHEMA_VERSION:
                version = await self._submit(
                    operation, lambda: pair.writer.submit(lambda: ensure_schema)
                )
            self._check_version(version)
            self._schema_checked = True
        self._check_open()  # closed while the version was read: its threads may be gone
        return pair

    def _check_version(self, version: object) -> None:
        if version == DURABLE_SCHEMA_VERSION:
            return
        if isinstance(version, int) and version > DURABLE_SCHEMA_VERSION:
            raise IncompatibleSchema(
                f"{self.path} has durable schema version {version}, newer than version "
                f"{DURABLE_SCHEMA_VERSION} that this agentflow understands; upgrade agentflow"
            )
        raise CheckpointCorrupted(
            f"{self.path} holds an invalid durable schema version {version!r}"
        )


def _existing_version(path: Path) -> object:
    """The durable tables' version in ``path``, read without creating or changing anything."""
    if not path.is_file():
        raise StoreNotFound(f"{path} does not exist")
    try:
        conn = sqlite3.connect(f"{Path(os.path.abspath(path)).as_uri()}?mode=ro", uri=True)
        try:
            if conn.execute(_HAS_META).fetchone() is not None:
                version = _version(conn)
                if version is not None:
                    return version
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise CheckpointCorrupted(f"{path} is not a readable SQLite database") from exc
    raise StoreNotFound(f"{path} has no durable tables")


def _version(conn: sqlite3.Connection) -> object:
    rows = conn.execute(READ_VERSION).fetchall()
    return rows[0][0] if rows else None


class SqliteFileStore(ClosingStore):
    """What the SQLite durable stores share: namespace, file handle and lifecycle.

    Constructed from the checkpointer's arguments (``path``, ``synchronous``,
    ``busy_timeout``, ``secure_permissions``, see
    :class:`~agentflow.checkpoint.sqlite.SqliteCheckpointer`) and bound to a
    namespace like it. With ``create=False`` a file without the durable
    tables raises :class:`~agentflow.errors.StoreNotFound` and is left as it is.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ".runs/checkpoints.db",
        *,
        namespace: str | None = None,
        synchronous: str = "FULL",
        busy_timeout: float = 5.0,
        secure_permissions: bool = True,
        create: bool = True,
        sealing: KeyRing | None = None,
    ) -> None:
        self._namespace = validate_namespace(namespace)
        self._sealing = sealing
        self._file = SqliteFile(
            path,
            synchronous=synchronous,
            busy_timeout=busy_timeout,
            secure_permissions=secure_permissions,
            owner=type(self).__name__,
            create=create,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, namespace={self._namespace!r})"

    @property
    def namespace(self) -> str:
        """The tenant this store reads and writes ("" for the default one)."""
        return self._namespace

    @property
    def path(self) -> Path:
        """The database file."""
        return self._file.path

    async def close(self) -> None:
        """Release this store's use of the file's threads; safe to call twice."""
        await self._file.close()
