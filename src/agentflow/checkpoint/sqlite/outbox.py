"""A record's pending events delivered inside the SQLite transaction that leaves them.

``commit_step`` and ``start_run`` end their job with :func:`deliver_in`: each
event pending in the record they wrote is inserted into the event log (or
found there: an id accepted before keeps its first acceptance), and the
record's body is written again with those entries ``delivered`` at the log's
cursors. One transaction, so the step, its receipts and its events commit
together or not at all, and no delivery write follows.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from agentflow.checkpoint.outbox import Delivery, EventRow
from agentflow.checkpoint.sqlite.sql import BODY_PART, EVENT_BY_ID, INSERT_EVENT
from agentflow.durable.run.record import DurableCheckpoint

__all__ = ["deliver_in"]

#: The body row of one record, rewritten with its events delivered.
_SET_BODY: Final = f"""UPDATE agentflow_runs SET body = :body
    WHERE namespace = :namespace AND key = :key AND part = {BODY_PART}"""


def _sequence(conn: sqlite3.Connection, namespace: str, row: EventRow) -> int:
    """The sequence the log accepts ``row`` at, or accepted its id at before."""
    ids = {"namespace": namespace, "event_id": row.event_id}
    params = {
        **ids,
        "payload_digest": row.payload_digest,
        "run_id": row.run_id,
        "parent_run_id": row.parent_run_id,
        "event": row.stored,
    }
    added = conn.execute(INSERT_EVENT, params).fetchall()
    if added:
        return int(added[0][0])
    return int(conn.execute(EVENT_BY_ID, ids).fetchall()[0][1])  # seq: the rowid


def deliver_in(
    conn: sqlite3.Connection, namespace: str, record: DurableCheckpoint, delivery: Delivery
) -> DurableCheckpoint:
    """Append ``record``'s pending events and store it with them delivered, inside the
    writer's transaction; the record as stored (same revision)."""
    done, body = delivery.done(record, [_sequence(conn, namespace, r) for r in delivery.rows])
    conn.execute(_SET_BODY, {"namespace": namespace, "key": record.checkpoint_key, "body": body})
    return done
