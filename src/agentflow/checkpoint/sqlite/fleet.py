"""The SQLite store's batch claims of due runs, and its runs listed by holder.

A batch is one job of the writer thread, so one ``BEGIN IMMEDIATE``
transaction: the due threads (the summaries' due index, in wake order)
joined to their claimable records are read and each is claimed with its own
token before the transaction commits. SQLite lets one writer at a time into
a file, so a batch of another thread or process runs wholly before or after
this one and never claims the same run; a ``max_concurrent`` count read in
the job holds until it commits. One host (the file's), as every lease here.
"""

from __future__ import annotations

import abc
import json
import sqlite3
from typing import Any, Final

from agentflow.checkpoint.fleet import DueClaim, DueRun, FleetBase, held_params
from agentflow.checkpoint.rows import summary_of
from agentflow.checkpoint.sqlite.runs import SqliteRuns, head_from
from agentflow.checkpoint.sqlite.sql import HEAD_COLUMNS, LATEST_STEP
from agentflow.checkpoint.timestamps import wall_clock_ms
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

__all__ = ["SqliteFleet"]

_MAX: Final = MAX_WIRE_INTEGER
_IN_DEFINITIONS: Final = "IN (SELECT value FROM json_each(:definitions))"
#: The rules of due_claim_mode over the due threads' records, in wake order.
_DUE: Final = f"""SELECT r.key, {LATEST_STEP}, r.cycle_index,
    r.lease_expires_at_ms IS NOT NULL OR r.ambiguous
    FROM agentflow_threads t JOIN agentflow_runs r
        ON r.namespace = t.namespace AND r.key = t.thread AND r.part = 0
    WHERE t.namespace = :namespace AND t.wake_us IS NOT NULL AND t.wake_us <= :now_us
        AND t.thread NOT IN (SELECT value FROM json_each(:exclude))
        AND ({{definition}})
        AND r.status = '{CheckpointStatus.RUNNING.value}' AND NOT r.terminal
        AND (r.lease_expires_at_ms IS NULL OR r.lease_expires_at_ms <= :now)
        AND r.revision < {_MAX} AND r.cycle_index < {_MAX}
        AND (r.resume_attempt < {_MAX} OR (r.lease_expires_at_ms IS NULL AND NOT r.ambiguous))
        AND :now + :lease_ms <= {_MAX}
    ORDER BY t.wake_us, t.thread LIMIT :limit"""
#: The records each scope of :class:`~agentflow.checkpoint.fleet.DueClaim` may claim.
_SCOPES: Final = {
    "any": "1",
    "definitions": f"r.definition IS NULL OR r.definition {_IN_DEFINITIONS}",
    "limited": f"r.definition {_IN_DEFINITIONS}",
}
_LIVE: Final = f"""SELECT count(*) FROM agentflow_runs WHERE namespace = :namespace AND part = 0
    AND claim_token IS NOT NULL AND lease_expires_at_ms > :now AND definition {_IN_DEFINITIONS}"""
_HELD: Final = f"""SELECT claim_token, key, {", ".join(HEAD_COLUMNS)} FROM agentflow_runs
    WHERE namespace = :namespace AND part = 0 AND claim_token IS NOT NULL
        AND claim_token >= :lo AND claim_token < :hi AND claim_token > :after
    ORDER BY claim_token LIMIT :limit"""


class SqliteFleet(SqliteRuns, FleetBase, abc.ABC):
    """The record part of :class:`~agentflow.checkpoint.sqlite.SqliteCheckpointer`,
    with a fleet's batch claims and holder listing."""

    async def _claim_due(self, request: DueClaim) -> list[DueRun]:
        due = _DUE.replace("{definition}", _SCOPES[request.scope])
        params: dict[str, Any] = {
            "namespace": self._namespace,
            "now_us": request.now_us,
            "exclude": json.dumps(sorted(request.exclude)),
            "definitions": json.dumps(list(request.definitions or ())),
            "lease_ms": request.lease_ms,
        }

        def apply(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            now = wall_clock_ms()
            room = len(request.tokens)
            if request.max_concurrent is not None:
                live = conn.execute(_LIVE, {**params, "now": now}).fetchall()[0][0]
                room = max(0, min(room, request.max_concurrent - live))
            found = conn.execute(due, {**params, "now": now, "limit": room}).fetchall()
            claimed = []
            for (key, step, cycle, recovery), token in zip(found, request.tokens, strict=False):
                mode = ClaimMode.RECOVERY if recovery else ClaimMode.CONTINUE
                job = self._claiming(key, cycle + 1, token, request.lease_ms, mode)
                claimed.append((key, step, cycle + 1, mode, token, job(conn)))
            return claimed

        claimed = await self._write("claim_due", apply)
        return [
            DueRun(
                key,
                step,
                self._claimed(
                    key,
                    outcome,
                    cycle_index=cycle,
                    claim_token=token,
                    lease_ms=request.lease_ms,
                    mode=mode,
                ),
                mode is ClaimMode.RECOVERY,
            )
            for key, step, cycle, mode, token, outcome in claimed
        ]

    async def _held(
        self, holder: str, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        params = held_params(self._namespace, holder, after, limit)
        rows: list[Any] = await self._read(
            "list_held", lambda conn: conn.execute(_HELD, params).fetchall()
        )
        runs = [summary_of(row[1], head_from(row[1], row[2:])) for row in rows[:limit]]
        return runs, rows[limit - 1][0] if len(rows) > limit else None
