"""A :class:`~agentflow.durable.DurableStore` in the SQLite file of the checkpointer.

Each operation is one statement in the transaction of the file's shared
writer thread (see :mod:`~agentflow.durable.stores.sqlite_sql` for the
layout and the statements): the guard and the write are decided together
under SQLite's write lock, across threads and processes, and a write that
matched nothing is answered from the head re-read in the same transaction.

Leases run on this machine's wall clock, read inside that transaction: every
process on one file agrees on who holds a run as long as their clocks agree
(one machine, or synchronized clocks). A database server's clock is the way
to be independent of them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from agentflow.checkpoint.sqlite import from_url as checkpointer_from_url
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    DurableConflict,
    DurableCorrupted,
    DurableError,
)
from agentflow.durable.leases import check_claim_request, claim_refusal, claimed_head, renew_refusal
from agentflow.checkpoint.timestamps import wall_clock_ms
from agentflow.durable.paged import ListedRuns
from agentflow.durable.planned import PlannedWrites
from agentflow.durable.record import DurableCheckpoint
from agentflow.durable.rows import RunSummary
from agentflow.durable.stores.sqlite_file import SqliteFileStore
from agentflow.durable.stores.sqlite_rows import (
    decode_claimed,
    decode_loaded,
    head_from,
    head_params,
    journal_text,
    write_params,
)
from agentflow.durable.stores.sqlite_sql import (
    BODY,
    CLAIM,
    DELETE,
    HEAD,
    INSERT_RUN,
    LIST_AFTER,
    LIST_STATUS_AFTER,
    LOAD,
    REFUSED,
    RENEW,
)
from agentflow.durable.transitions import (
    Write,
    refusal,
)
from agentflow.durable.validators import validate_checkpoint_key

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["SqliteDurableStore", "from_url"]


class SqliteDurableStore(PlannedWrites, ListedRuns, SqliteFileStore):
    """Durable records of runs in a SQLite file, beside its checkpoints.

    Takes the arguments of :class:`~agentflow.checkpoint.sqlite.SqliteCheckpointer`
    and shares its writer and reader threads when both are open on one file
    in a process. The durable tables are created on first use.
    """

    kind: ClassVar[str] = "sqlite"

    def _run(self, key: str) -> dict[str, Any]:
        return {"namespace": self._namespace, "key": key}

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        row = self._parts.encode_row(checkpoint)
        params = {
            **self._run(row.key),
            **head_params(row.head),
            "model_journal": journal_text(row.model_journal),
            "tool_journal": journal_text(row.tool_journal),
            "body": row.body,
        }
        inserted: int = await self._file.write(
            "create", lambda conn: conn.execute(INSERT_RUN, params).rowcount
        )
        if not inserted:
            raise CheckpointAlreadyExists(f"a record exists under {row.key!r}")

    async def load(self, key: str) -> DurableCheckpoint | None:
        run = self._run(validate_checkpoint_key(key))
        found: DurableCheckpoint | None = await self._file.read(
            "load", lambda conn: decode_loaded(self._parts, key, conn.execute(LOAD, run).fetchall())
        )
        return found

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        check_claim_request(cycle_index, claim_token, lease_ms)
        run = self._run(validate_checkpoint_key(key))
        params = {
            **run,
            "cycle_index": cycle_index,
            "claim_token": claim_token,
            "lease_ms": lease_ms,
            "recovery": int(mode is ClaimMode.RECOVERY),
        }

        def apply(conn: sqlite3.Connection) -> tuple[int, Any, list[Any]]:
            now = wall_clock_ms()
            claimed = conn.execute(CLAIM, {**params, "now": now}).fetchall()
            if claimed:
                return now, claimed[0], conn.execute(BODY, run).fetchall()
            return now, None, conn.execute(HEAD, run).fetchall()

        now, claimed, found = await self._file.write("claim", apply)
        if claimed is not None:
            return decode_claimed(self._parts, key, claimed, found)
        head = head_from(key, found[0]) if found else None
        error = claim_refusal(head, cycle_index, now, mode)
        if error is None and head is not None:  # only an overflow is left: raise it
            claimed_head(head, cycle_index, claim_token, now_ms=now, lease_ms=lease_ms, mode=mode)
        raise error or DurableConflict("the claim matched nothing")

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        check_claim_request(1, claim_token, lease_ms)
        run = self._run(validate_checkpoint_key(key))
        params = {**run, "claim_token": claim_token, "lease_ms": lease_ms}

        def apply(conn: sqlite3.Connection) -> tuple[int, list[Any], list[Any]]:
            now = wall_clock_ms()
            renewed = conn.execute(RENEW, {**params, "now": now}).fetchall()
            return now, renewed, [] if renewed else conn.execute(HEAD, run).fetchall()

        now, renewed, found = await self._file.write("renew_claim", apply)
        if renewed:
            expiry: int = renewed[0][0]
            return expiry
        head = head_from(key, found[0]) if found else None
        raise renew_refusal(head, claim_token, now) or DurableError(
            "checkpoint_claim_invalid", "lease expiry is outside the JSON-safe range"
        )

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        """Apply a planned write as its one ``UPDATE``; if it matched nothing, say why."""
        statement, params = write_params(self._namespace, write)
        run = self._run(write.key)

        def apply(conn: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
            changed = conn.execute(statement, params).fetchall()
            return changed, [] if changed else conn.execute(REFUSED, run).fetchall()

        changed, found = await self._file.write(operation, apply)
        if changed:
            lease = next(lease for part, lease in changed if part == 0)
            return replace(write.record, lease_expires_at_ms=lease)
        if not found:
            raise refusal(None, write.guard)
        *columns, model_ok, tool_ok, has_body = found[0]
        head = head_from(write.key, columns)
        if write.guard.holds(head) and not (model_ok and tool_ok and has_body):
            raise DurableCorrupted(
                "checkpoint_row_invalid",
                f"stored record {write.key!r} has a damaged journal or no body row",
            )
        raise refusal(head, write.guard)

    async def delete(self, key: str) -> bool:
        run = self._run(validate_checkpoint_key(key))
        removed: int = await self._file.write(
            "delete", lambda conn: conn.execute(DELETE, run).rowcount
        )
        return removed > 0

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        start = "" if after is None else after  # every key sorts after ""
        params: dict[str, Any] = {"namespace": self._namespace, "after": start, "limit": limit + 1}
        statement = LIST_AFTER
        if status is not None:
            statement, params["status"] = LIST_STATUS_AFTER, status.value
        rows: list[Any] = await self._file.read(
            "list_runs", lambda conn: conn.execute(statement, params).fetchall()
        )
        runs = [RunSummary.of(row[0], head_from(row[0], row[1:])) for row in rows[:limit]]
        return runs, runs[-1].key if len(rows) > limit else None


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    create: bool = True,
    sealing: KeyRing | None = None,
) -> SqliteDurableStore:
    """``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``, as the checkpointer's."""
    return SqliteDurableStore(
        checkpointer_from_url(url).path, namespace=namespace, create=create, sealing=sealing
    )
