"""A :class:`~agentflow.durable.DurableStore` in PostgreSQL, beside the checkpointer's tables.

Each operation is one statement (see :mod:`~agentflow.durable.stores.postgres_sql`
for the layout and the statements): the guard is in the ``WHERE`` of the head's
``UPDATE``, so PostgreSQL's row lock decides between racing writers in any
number of processes (the loser re-checks the guard against the winner's row
and matches nothing). A write that matched nothing is answered from the head
read by a second statement.

Leases run on the server's clock (``clock_timestamp()``, read inside the
statement that compares them), so workers on machines with skewed clocks
agree on who holds a run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from agentflow.checkpoint.stores import safe_url, scheme_of
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    DurableConflict,
    DurableCorrupted,
    DurableError,
)
from agentflow.durable.leases import check_claim_request, claim_refusal, claimed_head, renew_refusal
from agentflow.durable.paged import ListedRuns
from agentflow.durable.planned import PlannedWrites
from agentflow.durable.record import DurableCheckpoint
from agentflow.durable.rows import RunSummary
from agentflow.durable.stores.postgres_base import PostgresDurableBase
from agentflow.durable.stores.postgres_rows import (
    HEAD_WIDTH,
    decode_run,
    head_from,
    head_params,
    journal_params,
    write_params,
)
from agentflow.durable.transitions import (
    Write,
    refusal,
)
from agentflow.durable.validators import validate_checkpoint_key
from agentflow.errors import InvalidStoreUrl

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["PostgresDurableStore", "from_url"]


class PostgresDurableStore(PlannedWrites, ListedRuns, PostgresDurableBase):
    """Durable records of runs in PostgreSQL, beside a checkpointer's tables.

    Takes the arguments of :class:`~agentflow.checkpoint.postgres.PostgresCheckpointer`
    (``dsn`` or ``pool``, ``table``, ``schema``, ``namespace``); the durable
    tables are created on first use.
    """

    kind: ClassVar[str] = "postgres"

    def _run(self, key: str) -> dict[str, Any]:
        return {"namespace": self._namespace, "key": key}

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        row = self._parts.encode_row(checkpoint)
        params = {
            **self._run(row.key),
            **head_params(row.head),
            **journal_params(row.model_journal, row.tool_journal),
            "body": row.body,
        }
        if not await self._fixed("create", "fetchval", "create", params):
            raise CheckpointAlreadyExists(f"a record exists under {row.key!r}")

    async def load(self, key: str) -> DurableCheckpoint | None:
        found = await self._fixed(
            "load", "fetchrow", "load", self._run(validate_checkpoint_key(key))
        )
        if found is None:
            return None
        return decode_run(
            self._parts, key, found[:HEAD_WIDTH], found[HEAD_WIDTH], found[HEAD_WIDTH + 1 :]
        )

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        check_claim_request(cycle_index, claim_token, lease_ms)
        params = {
            **self._run(validate_checkpoint_key(key)),
            "cycle_index": cycle_index,
            "claim_token": claim_token,
            "lease_ms": lease_ms,
            "recovery": int(mode is ClaimMode.RECOVERY),
        }
        now, seen, *claimed = await self._fixed("claim", "fetchrow", "claim", params)
        head, body, journal = claimed[:HEAD_WIDTH], claimed[HEAD_WIDTH], claimed[HEAD_WIDTH + 1 :]
        if head[0] is not None:
            if seen is not None and seen + 1 == head[0]:
                return decode_run(self._parts, key, head, body, journal)
            return await self._claimed_record(key, head[0])
        stored = await self._head("claim", key)
        error = claim_refusal(stored, cycle_index, now, mode)
        if error is None and stored is not None:  # only an overflow is left: raise it
            claimed_head(stored, cycle_index, claim_token, now_ms=now, lease_ms=lease_ms, mode=mode)
        raise error or DurableConflict("the claim matched nothing")

    async def _claimed_record(self, key: str, revision: int) -> DurableCheckpoint:
        """The record a claim took, when a write committed while the claim waited for the row.

        Nothing but the new holder can change the record's content now, so a
        fresh read is the claimed record, unless it already moved on.
        """
        record = await self.load(key)
        if record is None or record.revision != revision:
            raise DurableConflict("the claimed record moved on before it could be read")
        return record

    async def _head(self, operation: str, key: str) -> Any:
        found = await self._fixed(operation, "fetchrow", "refused", self._run(key))
        return None if found is None else head_from(key, found[:HEAD_WIDTH])

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        check_claim_request(1, claim_token, lease_ms)
        params = {
            **self._run(validate_checkpoint_key(key)),
            "claim_token": claim_token,
            "lease_ms": lease_ms,
        }
        now, expiry = await self._fixed("renew_claim", "fetchrow", "renew", params)
        if expiry is not None:
            renewed: int = expiry
            return renewed
        stored = await self._head("renew_claim", key)
        raise renew_refusal(stored, claim_token, now) or DurableError(
            "checkpoint_claim_invalid", "lease expiry is outside the JSON-safe range"
        )

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        """Apply a planned write as its one statement; if it matched nothing, say why."""
        shape, params = write_params(self._namespace, write)
        statement = self._sql.write(shape)
        changed = await self._query(operation, "fetch", statement, params)
        if changed:
            return replace(write.record, lease_expires_at_ms=changed[0][0])
        found = await self._fixed(operation, "fetchrow", "refused", self._run(write.key))
        if found is None:
            raise refusal(None, write.guard)
        head = head_from(write.key, found[:HEAD_WIDTH])
        if write.guard.holds(head) and not found[HEAD_WIDTH]:
            raise DurableCorrupted(
                "checkpoint_row_invalid", f"stored record {write.key!r} has no body row"
            )
        raise refusal(head, write.guard)

    async def delete(self, key: str) -> bool:
        run = self._run(validate_checkpoint_key(key))
        return bool(await self._fixed("delete", "fetchval", "delete", run))

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        start = "" if after is None else after  # every key sorts after ""
        params: dict[str, Any] = {"namespace": self._namespace, "after": start, "limit": limit + 1}
        name = "list_after"
        if status is not None:
            name, params["status"] = "list_status_after", status.value
        rows = await self._fixed("list_runs", "fetch", name, params)
        runs = [RunSummary.of(row[0], head_from(row[0], row[1:])) for row in rows[:limit]]
        return runs, runs[-1].key if len(rows) > limit else None


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    create: bool = True,
    sealing: KeyRing | None = None,
) -> PostgresDurableStore:
    """``postgresql://user@host:port/db`` (or ``postgres://``), as the checkpointer's."""
    if scheme_of(url) not in ("postgresql", "postgres"):
        raise InvalidStoreUrl(f"not a PostgreSQL URL: {safe_url(url)!r}")
    return PostgresDurableStore(url, namespace=namespace, create=create, sealing=sealing)
