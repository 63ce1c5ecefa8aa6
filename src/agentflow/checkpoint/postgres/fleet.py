"""A PostgreSQL store's batch claims of due runs, and its runs listed by holder.

A batch is one statement: the due threads (the summary's due index, in wake
order) joined to their records, the claimable ones locked ``FOR UPDATE SKIP
LOCKED`` up to the batch's size, and each of those claimed with its own
token. A row another claimer (or a writer) has locked is skipped, not waited
for, so workers sharing the table split the due runs and never lose a claim.

A batch with ``max_concurrent`` counts the live leases of its definitions
first; so that two claimers cannot both count the same free room, it runs in
a transaction that first takes an advisory lock on the definitions (the
claim's statement then sees every claim committed before the lock). Leases
run on the server's clock, as every claim's do.
"""

from __future__ import annotations

import abc
import hashlib
from typing import Any, Final

from agentflow.checkpoint.envelope import StoredParts
from agentflow.checkpoint.fleet import DueClaim, DueRun, FleetBase, held_params
from agentflow.checkpoint.postgres.connections import KeptConnections
from agentflow.checkpoint.postgres.rows import HEAD_WIDTH, decode_run, head_from
from agentflow.checkpoint.postgres.runs_sql import (
    HEAD_COLUMNS,
    HEAD_OF,
    JOURNAL_OF,
    NOW,
    PostgresPart,
    Statement,
)
from agentflow.checkpoint.rows import summary_of
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import DurableConflict
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER, canonical_json

__all__ = ["PostgresFleet"]

_RUNNING: Final = f"'{CheckpointStatus.RUNNING.value}'"
_TOKEN: Final = '(r.claim_token COLLATE "C")'
#: The live leases of the batch's definitions, subtracted from its limit.
_ROOM_LIMITED: Final = """room AS (SELECT greatest(0, :max_concurrent::bigint - (
        SELECT count(*) FROM {runs} l, now WHERE l.namespace = :namespace
        AND l.definition = ANY(:definitions::text[]) AND l.claim_token IS NOT NULL
        AND l.lease_expires_at_ms > now.ms)) AS n FROM now)"""
_ROOM: Final = "room AS (SELECT :wanted::bigint AS n)"
#: The rules of due_claim_mode, and the claimable rows locked in wake order.
_PICKED: Final = f"""picked AS (
    SELECT r.key, t.latest_step, t.wake_us,
        (r.lease_expires_at_ms IS NOT NULL OR r.ambiguous) AS recovery
    FROM {{threads}} t JOIN {{runs}} r ON r.namespace = t.namespace AND r.key = t.thread, now
    WHERE t.namespace = :namespace AND t.status = 'waiting' AND t.wake_us <= :now_us
        AND NOT (t.thread = ANY(:exclude::text[]))
        AND ({{definition}})
        AND r.status = {_RUNNING} AND NOT r.terminal
        AND (r.lease_expires_at_ms IS NULL OR r.lease_expires_at_ms <= now.ms)
        AND r.revision < {MAX_WIRE_INTEGER} AND r.cycle_index < {MAX_WIRE_INTEGER}
        AND (r.resume_attempt < {MAX_WIRE_INTEGER}
             OR (r.lease_expires_at_ms IS NULL AND NOT r.ambiguous))
        AND now.ms + :lease_ms <= {MAX_WIRE_INTEGER}
    ORDER BY t.wake_us, t.thread
    LIMIT (SELECT n FROM room)
    FOR UPDATE OF r SKIP LOCKED)"""
#: Each picked row claimed with its own token; the body and journal read beside
#: the new head are the claimed record's when ``seen`` (the head in the
#: statement's snapshot) is the revision before the claim.
_CLAIM_DUE: Final = f"""WITH now AS {NOW}, {{room}}, {_PICKED},
numbered AS (SELECT p.*, row_number() OVER (ORDER BY p.wake_us, p.key) AS n FROM picked p),
claimed AS (
    UPDATE {{runs}} r SET revision = r.revision + 1,
        resume_attempt = r.resume_attempt + p.recovery::int, claim_token = tok.token,
        claimed_cycle = r.cycle_index + 1, lease_expires_at_ms = now.ms + :lease_ms
    FROM numbered p JOIN unnest(:tokens::text[]) WITH ORDINALITY AS tok(token, n) ON tok.n = p.n,
        now
    WHERE r.namespace = :namespace AND r.key = p.key
    RETURNING p.n, p.latest_step, p.recovery, {HEAD_OF.format(of="r")}, r.key
)
SELECT c.key, c.latest_step, c.recovery,
    (SELECT s.revision FROM {{runs}} s WHERE s.namespace = :namespace AND s.key = c.key),
    {HEAD_OF.format(of="c")}, b.body, j.kinds, j.idxs, j.entries
FROM claimed c LEFT JOIN {{bodies}} b ON b.namespace = :namespace AND b.key = c.key
    {JOURNAL_OF.format(of="c.key")}
ORDER BY c.n"""
#: The records each scope of :class:`~agentflow.checkpoint.fleet.DueClaim` may claim.
_SCOPES: Final = {
    "any": "TRUE",
    "definitions": "r.definition IS NULL OR r.definition = ANY(:definitions::text[])",
    "limited": "r.definition = ANY(:definitions::text[])",
}
_HELD: Final = f"""SELECT r.claim_token, r.key, {", ".join(f"r.{c}" for c in HEAD_COLUMNS)}
    FROM {{runs}} r WHERE r.namespace = :namespace AND r.claim_token IS NOT NULL
        AND {_TOKEN} >= :lo AND {_TOKEN} < :hi AND {_TOKEN} > :after
    ORDER BY {_TOKEN} LIMIT :limit"""


def _claim_text(request: DueClaim) -> str:
    room = _ROOM_LIMITED if request.max_concurrent is not None else _ROOM
    return _CLAIM_DUE.replace("{room}", room).replace("{definition}", _SCOPES[request.scope])


class PostgresFleet(PostgresPart, StoredParts, FleetBase, abc.ABC):
    """The fleet part of :class:`~agentflow.checkpoint.postgres.PostgresCheckpointer`."""

    _connections: KeptConnections
    _fleet_statements: dict[str, Statement] | None = None

    def _fleet_statement(self, text: str) -> Statement:
        if self._fleet_statements is None:
            self._fleet_statements = {}
        statement = self._fleet_statements.get(text)
        if statement is None:
            statement = Statement.of(text.format(**self._sql.names))
            self._fleet_statements[text] = statement
        return statement

    def _limit_lock(self, definitions: tuple[str, ...]) -> int:
        """The transaction lock of a limited batch's definitions (a collision only
        serialises more)."""
        scope = canonical_json(["agentflow-fleet", self._sql.names["runs"], self._namespace])
        digest = hashlib.blake2b(scope + "".join(definitions).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    async def _claim_due(self, request: DueClaim) -> list[DueRun]:
        statement = self._fleet_statement(_claim_text(request))
        params: dict[str, Any] = {
            "namespace": self._namespace,
            "now_us": request.now_us,
            "wanted": len(request.tokens),
            "tokens": list(request.tokens),
            "lease_ms": request.lease_ms,
            "definitions": list(request.definitions or ()),
            "max_concurrent": request.max_concurrent,
            "exclude": sorted(request.exclude),
        }
        if request.max_concurrent is None:
            rows = await self._fetch("claim_due", "fetch", statement, params)
        else:
            assert request.definitions is not None
            rows = await self._limited(self._limit_lock(request.definitions), statement, params)
        return [await self._due_run(row) for row in rows]

    async def _limited(self, lock: int, statement: Statement, params: dict[str, Any]) -> Any:
        """The limited batch's statement, in a transaction under its advisory lock."""
        self._check_open()
        try:
            async with self._connections.lease() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", lock)
                return await conn.fetch(statement.text, *statement.args(params))
        except Exception as exc:
            self._reraise(exc, "claim_due")

    async def _due_run(self, row: Any) -> DueRun:
        key, step, recovery, seen, *columns = row
        revision = columns[0]
        if seen is not None and seen + 1 == revision:
            return DueRun(key, step, decode_run(self._parts, key, columns), bool(recovery))
        reread = await self.load(key)  # a write committed while the claim waited for the row
        if reread is None or reread.revision != revision:
            raise DurableConflict("the claimed record moved on before it could be read")
        return DueRun(key, step, reread, bool(recovery))

    async def _held(
        self, holder: str, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        params = held_params(self._namespace, holder, after, limit)
        rows = await self._fetch("list_held", "fetch", self._fleet_statement(_HELD), params)
        runs = [summary_of(row[1], head_from(row[1], row[2 : 2 + HEAD_WIDTH])) for row in rows]
        more = len(rows) > limit
        return runs[:limit], rows[limit - 1][0] if more else None
