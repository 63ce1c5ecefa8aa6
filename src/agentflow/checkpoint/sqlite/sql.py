"""The statements of the SQLite store, over the tables of :mod:`.schema`.

Checkpoints: one row per step, and one summary row per thread that every put,
prune and delete keeps right in its own transaction (the latest step's status
and wake instant, and the status the thread's record imposes), so listings cost
O(page): each summary is read with its latest step's row, found by one seek.

Records: a run is two rows of ``agentflow_runs``, its **head** (``part = 0``:
every head column) and its **body** (``part = 1``), so a claim, a renewal or
a journal write rewrites only the small head row, never the body's pages;
a write that changes the body changes both rows in **one** ``UPDATE`` guarded
by a constant subquery on the head row. Each journal entry is a row of
``agentflow_journal``, so recording a call writes one small row whatever the
journal's length. Every write statement carries its whole guard, so it
changes nothing unless the stored head is the caller's snapshot's;
``RETURNING`` says whether it applied. Leases are compared with ``:now``, the
writer's clock read inside the transaction.

Events: rows keyed by a sequence that only grows (``AUTOINCREMENT``: a
deleted run's sequences are never handed out again) and unique by
(namespace, event id).
"""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from typing import Final

from agentflow.checkpoint.rows import RunHead
from agentflow.checkpoint.store_base import RUN_STATUSES
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

#: The head columns: the fields of :class:`~agentflow.checkpoint.rows.RunHead`, in order.
HEAD_COLUMNS: Final = tuple(field.name for field in fields(RunHead))
_HEAD: Final = ", ".join(HEAD_COLUMNS)
HEAD_PART: Final = 0
BODY_PART: Final = 1
#: The part number a journal row carries in :data:`LOAD` (after the head and body rows).
JOURNAL_PART: Final = 2

# -- checkpoints -------------------------------------------------------------

KEY: Final = "namespace = ? AND thread = ?"
_ROWS: Final = "SELECT step, revision, payload FROM agentflow_checkpoints WHERE " + KEY
GET_LATEST: Final = f"{_ROWS} ORDER BY step DESC LIMIT 1"
GET_STEP: Final = f"{_ROWS} AND step = ?"
#: The rows with ``?3 < step <= ?4``, oldest first (``HISTORY``) or newest first.
HISTORY: Final = f"{_ROWS} AND step > ? AND step <= ? ORDER BY step LIMIT ?"
HISTORY_NEWEST_FIRST: Final = f"{_ROWS} AND step > ? AND step <= ? ORDER BY step DESC LIMIT ?"
#: The rows of the steps in the JSON array ``?3``: one index probe each.
STEPS: Final = f"{_ROWS} AND step IN (SELECT value FROM json_each(?))"
REVISION: Final = f"SELECT revision FROM agentflow_checkpoints WHERE {KEY} AND step = ?"
UPSERT: Final = """INSERT INTO agentflow_checkpoints VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (namespace, thread, step) DO UPDATE SET revision = revision + 1,
    ts_us = excluded.ts_us, ts = excluded.ts, interrupted = excluded.interrupted,
    done = excluded.done, wake_at = excluded.wake_at, payload = excluded.payload,
    wake_us = excluded.wake_us, status = excluded.status"""
#: The status a record in each stored status imposes on its thread (NULL: none).
RUN_STATUS_OF: Final = (
    "CASE status "
    + " ".join(f"WHEN '{run.value}' THEN '{thread}'" for run, thread in RUN_STATUSES.items())
    + " END"
)
#: The status the record of thread ``?2`` of namespace ``?1`` imposes.
_RECORD_STATUS: Final = f"""(SELECT {RUN_STATUS_OF} FROM agentflow_runs
    WHERE namespace = ?1 AND key = ?2 AND part = {HEAD_PART})"""
#: The thread's summary when step ``?3`` is its latest: a new one takes the record's
#: status, an existing one keeps the one it has and is written only when the step's
#: status columns differ from its own. The latest step and its instant are read from
#: the step's own row (:data:`_SUMMARIES`), so the usual put (a running step after a
#: running step) leaves the summary's pages untouched: its commit writes the WAL
#: frames of the step alone.
UPSERT_SUMMARY: Final = f"""INSERT INTO agentflow_threads
    (namespace, thread, interrupted, done, wake_at, status, wake_us, run_status)
    SELECT ?1, ?2, ?4, ?5, ?6, ?7, ?8, {_RECORD_STATUS}
    WHERE NOT EXISTS (SELECT 1 FROM agentflow_checkpoints
        WHERE namespace = ?1 AND thread = ?2 AND step > ?3)
    ON CONFLICT (namespace, thread) DO UPDATE SET interrupted = excluded.interrupted,
    done = excluded.done, wake_at = excluded.wake_at, status = excluded.status,
    wake_us = excluded.wake_us
    WHERE interrupted IS NOT excluded.interrupted OR done IS NOT excluded.done
    OR wake_at IS NOT excluded.wake_at OR status IS NOT excluded.status
    OR wake_us IS NOT excluded.wake_us"""
REBUILD_SUMMARY: Final = f"""INSERT INTO agentflow_threads
    (namespace, thread, interrupted, done, wake_at, status, wake_us, run_status)
    SELECT namespace, thread, interrupted, done, wake_at, status, wake_us, {_RECORD_STATUS}
    FROM agentflow_checkpoints WHERE namespace = ?1 AND thread = ?2
    ORDER BY step DESC LIMIT 1"""
DELETE_STEPS: Final = f"DELETE FROM agentflow_checkpoints WHERE {KEY}"
DELETE_SUMMARY: Final = f"DELETE FROM agentflow_threads WHERE {KEY}"
#: What every record write sets: the status the record now imposes on its thread.
SET_RUN_STATUS: Final = """UPDATE agentflow_threads SET run_status = :run_status
    WHERE namespace = :namespace AND thread = :key AND run_status IS NOT :run_status"""
#: The latest step of the summary ``t``'s thread (one seek of the steps' primary key).
LATEST_STEP: Final = """(SELECT max(step) FROM agentflow_checkpoints
    WHERE namespace = t.namespace AND thread = t.thread)"""
#: Each summary with its latest step's number and instant (NULL: no step is stored).
_SUMMARIES: Final = f"""SELECT t.thread, c.step, t.interrupted, t.done, c.ts, t.wake_at,
    t.run_status FROM agentflow_threads t LEFT JOIN agentflow_checkpoints c
    ON c.namespace = t.namespace AND c.thread = t.thread AND c.step = {LATEST_STEP}"""
LIST_AFTER: Final = f"""{_SUMMARIES} WHERE t.namespace = ? AND t.thread > ?
    ORDER BY t.thread LIMIT ?"""
#: On the expression index ``agentflow_threads_by_status``: the record's status, else the step's.
LIST_STATUS_AFTER: Final = f"""{_SUMMARIES} WHERE t.namespace = ?
    AND coalesce(t.run_status, t.status) = ? AND t.thread > ? ORDER BY t.thread LIMIT ?"""
DUE: Final = f"""{_SUMMARIES} WHERE t.namespace = ? AND t.wake_us IS NOT NULL
    AND t.wake_us <= ? AND (t.wake_us, t.thread) > (?, ?) ORDER BY t.wake_us, t.thread LIMIT ?"""
STORE_SECRET: Final = "INSERT OR IGNORE INTO agentflow_meta VALUES ('cursor_secret', ?)"
READ_SECRET: Final = "SELECT value FROM agentflow_meta WHERE key = 'cursor_secret'"

# -- records -------------------------------------------------------------------

_RUN: Final = "namespace = :namespace AND key = :key"
_HEAD_ROW: Final = f"{_RUN} AND part = {HEAD_PART}"
_BODY_ROW: Final = f"{_RUN} AND part = {BODY_PART}"
_HEAD_VALUES: Final = ", ".join(f":{name}" for name in HEAD_COLUMNS)
_NO_HEAD: Final = ", ".join("NULL" for _ in HEAD_COLUMNS)
#: Both rows (the head with the run definition's digest), or nothing when any row
#: of the key exists.
INSERT_RUN: Final = f"""INSERT INTO agentflow_runs (namespace, key, part, {_HEAD}, body, definition)
    SELECT * FROM (VALUES (:namespace, :key, {HEAD_PART}, {_HEAD_VALUES}, NULL, :definition),
    (:namespace, :key, {BODY_PART}, {_NO_HEAD}, :body, NULL))
    WHERE NOT EXISTS (SELECT 1 FROM agentflow_runs WHERE {_RUN})"""
#: One statement, so one snapshot: the head row, the body row, then every journal
#: row by kind and index (``kind`` and ``idx`` are NULL on the first two).
LOAD: Final = f"""SELECT part, NULL, NULL, {_HEAD}, body FROM agentflow_runs WHERE {_RUN}
    UNION ALL SELECT {JOURNAL_PART}, kind, idx, {_NO_HEAD}, entry FROM agentflow_journal
    WHERE {_RUN} ORDER BY 1, 2, 3"""
HEAD: Final = f"SELECT {_HEAD} FROM agentflow_runs WHERE {_HEAD_ROW}"
#: What a refused write is told apart by: the head, and whether the body row exists.
REFUSED: Final = f"""SELECT {_HEAD}, EXISTS (SELECT 1 FROM agentflow_runs WHERE {_BODY_ROW})
    FROM agentflow_runs WHERE {_HEAD_ROW}"""
#: The lease of a record, to refuse deleting a live one.
LEASE: Final = f"SELECT lease_expires_at_ms FROM agentflow_runs WHERE {_HEAD_ROW}"
DELETE_RUN: Final = f"DELETE FROM agentflow_runs WHERE {_RUN}"
DELETE_JOURNAL: Final = f"DELETE FROM agentflow_journal WHERE {_RUN}"
#: One entry put at its place; an unchanged entry is left as it is.
PUT_ENTRY: Final = """INSERT INTO agentflow_journal VALUES (:namespace, :key, :kind, :idx, :entry)
    ON CONFLICT (namespace, key, kind, idx) DO UPDATE SET entry = excluded.entry
    WHERE entry IS NOT excluded.entry"""
#: The entries past a replaced journal's new length.
TRIM_JOURNAL: Final = f"DELETE FROM agentflow_journal WHERE {_RUN} AND kind = :kind AND idx >= :idx"

_RUNNING: Final = f"'{CheckpointStatus.RUNNING.value}'"
_CLAIMABLE: Final = f"{_RUNNING}, '{CheckpointStatus.RECONCILIATION_REQUIRED.value}'"
#: The rules of :func:`~agentflow.checkpoint.claims.claim_refusal` and the overflow
#: checks of :func:`~agentflow.checkpoint.claims.claimed_head`, as one guard.
CLAIM: Final = f"""UPDATE agentflow_runs SET revision = revision + 1, status = {_RUNNING},
    resume_attempt = resume_attempt + :recovery, claim_token = :claim_token,
    claimed_cycle = :cycle_index, lease_expires_at_ms = :now + :lease_ms
    WHERE {_HEAD_ROW} AND NOT terminal AND status IN ({_CLAIMABLE})
    AND cycle_index + 1 = :cycle_index
    AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= :now)
    AND (:recovery OR (lease_expires_at_ms IS NULL AND NOT ambiguous AND status = {_RUNNING}))
    AND revision < {MAX_WIRE_INTEGER} AND resume_attempt + :recovery <= {MAX_WIRE_INTEGER}
    AND :now + :lease_ms <= {MAX_WIRE_INTEGER}
    RETURNING part"""
#: One integer of the head row; same-sized, so SQLite overwrites the row in place.
RENEW: Final = f"""UPDATE agentflow_runs SET lease_expires_at_ms = :now + :lease_ms
    WHERE {_HEAD_ROW} AND claim_token = :claim_token AND lease_expires_at_ms > :now
    AND :now + :lease_ms <= {MAX_WIRE_INTEGER}
    RETURNING lease_expires_at_ms"""
_PAGE: Final = f"part = {HEAD_PART} AND key > :after ORDER BY key LIMIT :limit"
_LISTED: Final = f"SELECT key, {_HEAD} FROM agentflow_runs WHERE namespace = :namespace"
LIST_RUNS: Final = f"{_LISTED} AND {_PAGE}"
LIST_RUNS_STATUS: Final = f"{_LISTED} AND status = :status AND {_PAGE}"


@lru_cache(maxsize=32)
def write_statement(
    *,
    body: bool,
    keep_lease: bool,
    claimed_cycle: bool,
    resume_attempt: bool,
    terminal_acknowledged: bool,
    keep_claim: bool = False,
) -> str:
    """The ``UPDATE`` of one planned write's head (and body), named by its shape.

    ``keep_claim``: the write leaves the claim token as the guard has it, so the
    statement does not set it (SQLite rewrites an index entry of every column
    an ``UPDATE`` sets, and the claim token is indexed by holder).

    A write with a body changes both rows (each column takes its new value on
    its own row, NULL on the other); any other write changes the head row
    alone. The optional guard terms are those a
    :class:`~agentflow.checkpoint.plans.Guard` sets. ``RETURNING`` gives
    each changed row's part and the head's lease. The journal rows are written
    after it, in the same transaction, once it applied.
    """
    values = {name: f":{name}" for name in HEAD_COLUMNS}
    if keep_lease:
        del values["lease_expires_at_ms"]
    if keep_claim:
        del values["claim_token"]
    guard = [
        "revision = :g_revision",
        "claim_token IS :g_claim_token",
        "terminal = :g_terminal",
        "identity = :g_identity",
    ]
    for name, wanted in (
        ("claimed_cycle", claimed_cycle),
        ("resume_attempt", resume_attempt),
        ("terminal_acknowledged", terminal_acknowledged),
    ):
        if wanted:
            guard.append(f"{name} IS :g_{name}")
    held = " AND ".join(guard)
    if not body:
        sets = ", ".join(f"{name} = {value}" for name, value in values.items())
        return f"""UPDATE agentflow_runs SET {sets} WHERE {_HEAD_ROW} AND {held}
            RETURNING part, lease_expires_at_ms"""
    on_head = [f"{name} = iif(part = {HEAD_PART}, {value}, NULL)" for name, value in values.items()]
    sets = ", ".join([*on_head, f"body = iif(part = {BODY_PART}, :body, NULL)"])
    return f"""UPDATE agentflow_runs SET {sets} WHERE {_RUN}
        AND EXISTS (SELECT 1 FROM agentflow_runs WHERE {_HEAD_ROW} AND {held})
        AND EXISTS (SELECT 1 FROM agentflow_runs WHERE {_BODY_ROW})
        RETURNING part, lease_expires_at_ms"""


# -- events --------------------------------------------------------------------

INSERT_EVENT: Final = """INSERT INTO agentflow_events
    (namespace, event_id, payload_digest, run_id, parent_run_id, event)
    VALUES (:namespace, :event_id, :payload_digest, :run_id, :parent_run_id, :event)
    ON CONFLICT (namespace, event_id) DO NOTHING RETURNING seq"""
EVENT_BY_ID: Final = """SELECT payload_digest, seq FROM agentflow_events
    WHERE namespace = :namespace AND event_id = :event_id"""
REWRITE_EVENT: Final = """UPDATE agentflow_events SET event = :event
    WHERE namespace = :namespace AND event_id = :event_id"""
DELETE_EVENTS: Final = "DELETE FROM agentflow_events WHERE namespace = :namespace AND run_id = :key"
_EVENTS_OF: Final = """SELECT seq, event_id, payload_digest, event FROM agentflow_events
    WHERE namespace = :namespace AND {member} = :run_id AND seq > :after"""
REPLAY: Final = f"{_EVENTS_OF.format(member='run_id')} ORDER BY seq LIMIT :limit"
#: Two index ranges merged in sequence order as they are read, stopping at the
#: limit (an event naming the run as both its run and its parent appears once).
REPLAY_FAMILY: Final = f"""{_EVENTS_OF.format(member="run_id")}
    UNION {_EVENTS_OF.format(member="parent_run_id")} ORDER BY seq LIMIT :limit"""
