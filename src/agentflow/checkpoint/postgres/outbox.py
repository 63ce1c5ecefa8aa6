"""A record's pending events delivered inside the PostgreSQL transaction that leaves them.

``commit_step`` and ``start_run`` end their transaction with
:func:`deliver_in`: each event pending in the record they wrote is appended
by the event log's own statement (its run's transaction lock first, so
sequence order stays commit order for replays; an id accepted before keeps
its first acceptance), and the record's body is written again with those
entries ``delivered`` at the log's cursors. One transaction, so the step,
its receipts and its events commit together or not at all.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from agentflow.checkpoint.outbox import Delivery, EventRow
from agentflow.checkpoint.postgres.events import run_lock
from agentflow.checkpoint.postgres.runs_sql import Statement, Statements
from agentflow.durable.run.record import DurableCheckpoint

__all__ = ["deliver_in"]

_SET_BODY = "UPDATE {bodies} SET body = :body WHERE namespace = :namespace AND key = :key"


@lru_cache(maxsize=64)
def _set_body(bodies: str) -> Statement:
    return Statement.of(_SET_BODY.format(bodies=bodies))


async def _sequence(conn: Any, sql: Statements, namespace: str, row: EventRow) -> int:
    """The sequence the log accepts ``row`` at, or accepted its id at before."""
    locks = sorted({run_lock(namespace, run) for run in (row.run_id, row.parent_run_id) if run})
    first_lock, second_lock = (*locks, None, None)[:2]
    params = {
        "namespace": namespace,
        "event_id": row.event_id,
        "payload_digest": row.payload_digest,
        "run_id": row.run_id,
        "parent_run_id": row.parent_run_id,
        "event": row.stored,
        "first_lock": first_lock,
        "second_lock": second_lock,
    }
    append = sql.runs["append"]
    found = await conn.fetchrow(append.text, *append.args(params))
    assert found is not None  # added, or the row holding the id (locked: none can leave)
    return int(found[1])


async def deliver_in(
    conn: Any,
    sql: Statements,
    namespace: str,
    record: DurableCheckpoint,
    delivery: Delivery,
) -> DurableCheckpoint:
    """Append ``record``'s pending events and store it with them delivered, inside the
    caller's transaction; the record as stored (same revision)."""
    sequences = [await _sequence(conn, sql, namespace, row) for row in delivery.rows]
    done, body = delivery.done(record, sequences)
    statement = _set_body(sql.names["bodies"])
    params = {"namespace": namespace, "key": record.checkpoint_key, "body": body}
    await conn.execute(statement.text, *statement.args(params))
    return done
