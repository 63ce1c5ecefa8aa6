"""The records of a PostgreSQL store: one statement per operation.

Each write's guard is in the ``WHERE`` of the head's ``UPDATE`` (see
:mod:`~agentflow.checkpoint.postgres.runs_sql`), so PostgreSQL's row lock
decides between racing writers in any number of processes; a write that
matched nothing is answered from the head read by a second statement. Leases
run on the server's clock, so workers with skewed clocks agree on who holds a
run, and a delete refuses a live lease on that clock.
"""

from __future__ import annotations

import abc
from dataclasses import replace
from typing import Any

from agentflow.checkpoint.claims import (
    check_claim_request,
    claim_refusal,
    claimed_head,
    renew_refusal,
)
from agentflow.checkpoint.plans import Write, refusal
from agentflow.checkpoint.postgres.rows import (
    HEAD_WIDTH,
    decode_run,
    head_from,
    row_params,
    write_params,
)
from agentflow.checkpoint.postgres.runs_sql import PostgresPart
from agentflow.checkpoint.rows import RunHead, summary_of
from agentflow.checkpoint.runs import RunsBase
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    ClaimActive,
    DurableConflict,
    DurableCorrupted,
    DurableError,
)
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.validators import validate_checkpoint_key

__all__ = ["PostgresRuns"]


class PostgresRuns(PostgresPart, RunsBase, abc.ABC):
    """The record part of :class:`~agentflow.checkpoint.postgres.PostgresCheckpointer`."""

    def _run(self, key: str) -> dict[str, Any]:
        return {"namespace": self._namespace, "key": key}

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        self._check_open()
        row = self._parts.encode_row(checkpoint)
        params = row_params(self._namespace, row, checkpoint.run_definition_digest)
        if not await self._fetch("create", "fetchval", "create", params):
            raise CheckpointAlreadyExists(f"a record exists under {row.key!r}")

    async def load(self, key: str) -> DurableCheckpoint | None:
        self._check_open()
        run = self._run(validate_checkpoint_key(key))
        found = await self._fetch("load", "fetchrow", "load", run)
        return None if found is None else decode_run(self._parts, key, found)

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        self._check_open()
        check_claim_request(cycle_index, claim_token, lease_ms)
        params = {
            **self._run(validate_checkpoint_key(key)),
            "cycle_index": cycle_index,
            "claim_token": claim_token,
            "lease_ms": lease_ms,
            "recovery": int(mode is ClaimMode.RECOVERY),
        }
        now, seen, *claimed = await self._fetch("claim", "fetchrow", "claim", params)
        revision = claimed[0]
        if revision is not None:
            if seen is not None and seen + 1 == revision:
                return decode_run(self._parts, key, claimed)
            return await self._claimed_record(key, revision)
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

    async def _head(self, operation: str, key: str) -> RunHead | None:
        found = await self._fetch(operation, "fetchrow", "refused", self._run(key))
        return None if found is None else head_from(key, found[:HEAD_WIDTH])

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        self._check_open()
        check_claim_request(1, claim_token, lease_ms)
        params = {
            **self._run(validate_checkpoint_key(key)),
            "claim_token": claim_token,
            "lease_ms": lease_ms,
        }
        now, expiry = await self._fetch("renew_claim", "fetchrow", "renew", params)
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
        applied, lease = await self._fetch(operation, "fetchrow", self._sql.write(shape), params)
        if not applied:
            raise await self._refusal(operation, write)
        return replace(write.record, lease_expires_at_ms=lease)

    async def _refusal(self, operation: str, write: Write) -> Exception:
        """Why ``write`` matched nothing, from the stored head."""
        found = await self._fetch(operation, "fetchrow", "refused", self._run(write.key))
        if found is None:
            return refusal(None, write.guard)
        head = head_from(write.key, found[:HEAD_WIDTH])
        if write.guard.holds(head) and not found[HEAD_WIDTH]:
            return DurableCorrupted(
                "checkpoint_row_invalid", f"stored record {write.key!r} has no body row"
            )
        return refusal(head, write.guard)

    async def _delete_run(self, key: str, *, force: bool) -> bool:
        params = {**self._run(key), "force": force}
        live, gone = await self._fetch("delete", "fetchrow", "delete_run", params)
        if live:
            raise ClaimActive(f"run {key!r} is held by a live lease; delete it with force")
        return bool(gone)

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        start = "" if after is None else after  # every key sorts after ""
        params: dict[str, Any] = {"namespace": self._namespace, "after": start, "limit": limit + 1}
        name = "list_after"
        if status is not None:
            name, params["status"] = "list_status_after", status.value
        rows = await self._fetch("list_runs", "fetch", name, params)
        runs = [summary_of(row[0], head_from(row[0], row[1:])) for row in rows[:limit]]
        return runs, runs[-1].key if len(rows) > limit else None
