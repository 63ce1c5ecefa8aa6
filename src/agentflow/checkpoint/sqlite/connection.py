"""The one connection pair of a SQLite store: the file's writer and reader threads.

Every part of the store (checkpoints, records, events) reaches the file
through these four methods, so all of them share one group commit and one
error mapping. Driver errors become agentflow's here, named after the
operation, the driver's exception kept as ``__cause__``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from agentflow.checkpoint.sqlite.workers import Pair, PairKey, acquire_pair, release_pair
from agentflow.durable.errors import DurableCorrupted
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    CheckpointError,
    StoreClosed,
    StoreUnavailable,
)

__all__ = ["SqliteConnection"]

# Primary result codes (the low byte of an extended code) and what they mean to a caller.
_CORRUPT_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_UNAVAILABLE_CODES: Final = frozenset(
    getattr(sqlite3, f"SQLITE_{name}")
    for name in ("BUSY", "LOCKED", "IOERR", "FULL", "CANTOPEN", "PROTOCOL", "NOMEM")
)
#: How sqlite3 reports a TEXT value that is not UTF-8 (a damaged column).
_NOT_UTF8: Final = "Could not decode to UTF-8"


class SqliteConnection:
    """The writer and reader a store shares with every store on its file in this process.

    The pair starts on first use (:func:`~agentflow.checkpoint.sqlite.workers.acquire_pair`)
    and is released by ``close``, after the queued writes.
    """

    path: Path
    _key: PairKey
    _pair: Pair | None = None
    _closed: bool

    def _started(self) -> Pair:
        pair = self._pair
        if pair is None:
            if self._closed:
                raise StoreClosed(f"this {type(self).__name__} is closed")
            pair = self._pair = acquire_pair(self._key)
        return pair

    async def _submit(self, operation: str, job: Callable[[Pair], Awaitable[Any]]) -> Any:
        try:
            return await job(self._started())
        except AgentflowError:
            raise
        except Exception as exc:
            if isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(_NOT_UTF8):
                # sqlite3's message quotes the column's text: stored data stays out of errors
                raise DurableCorrupted(
                    "checkpoint_row_invalid",
                    f"sqlite {operation}: a stored text column is not UTF-8 (damaged)",
                ) from None
            error = self._driver_error(exc, operation)
            if error is None:
                raise
            raise error from exc

    async def _prepared(
        self, operation: str, prepare: Callable[[], Callable[[sqlite3.Connection], Any]]
    ) -> Any:
        """Run ``prepare`` on the writer thread (encoding: bad input fails alone), then
        what it returns inside the writer's next transaction."""
        return await self._submit(operation, lambda pair: pair.writer.submit(prepare))

    async def _write(self, operation: str, apply: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``apply`` inside the writer's next transaction (one group commit)."""
        return await self._prepared(operation, lambda: apply)

    async def _read(self, operation: str, read: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``read`` on the reader's connection (committed data only)."""
        return await self._submit(operation, lambda pair: pair.reader.submit(read))

    async def _close_store(self) -> None:
        """Finish queued writes, then close both connections and stop both threads
        (unless another open store on the same file still uses them)."""
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
