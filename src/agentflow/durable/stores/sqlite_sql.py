"""The tables and statements of the SQLite durable store, beside the checkpointer's.

A run is two rows of one table: its **head** row (``part = 0``: every head
column and both journals, each a JSON array of entries) and its **body** row
(``part = 1``: the body bytes). SQLite rewrites a whole row whenever its size
changes, so keeping the body in a row of its own means a claim or a journal
write rewrites only the small head row, never the body's pages; and because
both rows live in one table, a write that changes the body still changes
head and body in **one** ``UPDATE``, guarded by a subquery on the head row
(a constant subquery, evaluated once, before either row changes).

Every write statement carries its whole guard, so it changes nothing unless
the stored head is the one the caller's snapshot had; ``RETURNING`` tells the
caller whether it applied. Leases are compared with ``:now``, the writer's
clock read inside the transaction.

The tables are created on a store's first use in a file that has none, and
versioned under their own key in the checkpointer's ``agentflow_meta`` table.
"""

from __future__ import annotations

import sqlite3
from dataclasses import fields
from functools import lru_cache
from typing import Final

from agentflow.durable.canonical import MAX_WIRE_INTEGER
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.rows import RunHead

__all__ = [
    "BODY",
    "CLAIM",
    "DELETE",
    "DURABLE_SCHEMA_VERSION",
    "EVENT_BY_ID",
    "HEAD",
    "HEAD_COLUMNS",
    "INSERT_EVENT",
    "INSERT_RUN",
    "LIST_AFTER",
    "LIST_STATUS_AFTER",
    "LOAD",
    "READ_VERSION",
    "REFUSED",
    "RENEW",
    "REPLAY",
    "REPLAY_FAMILY",
    "ensure_schema",
    "write_statement",
]

#: Version of the durable tables, kept in ``agentflow_meta`` under :data:`_VERSION_KEY`.
DURABLE_SCHEMA_VERSION: Final = 1
_VERSION_KEY: Final = "durable_schema_version"
_RUNS: Final = "agentflow_durable_runs"
_EVENTS: Final = "agentflow_durable_events"
#: The two rows of a run.
_HEAD_PART: Final = 0
_BODY_PART: Final = 1

#: The head columns: the fields of :class:`~agentflow.durable.rows.RunHead`, in order.
HEAD_COLUMNS: Final = tuple(field.name for field in fields(RunHead))
_HEAD: Final = ", ".join(HEAD_COLUMNS)
_JOURNALS: Final = ("model_journal", "tool_journal")

# STRICT: a column holds only its declared type, so a comparison in a guard
# never meets SQLite's type affinity (text "1" is not the integer 1).
_DDL: Final = (
    f"""CREATE TABLE {_RUNS} (namespace TEXT NOT NULL, key TEXT NOT NULL,
    part INTEGER NOT NULL CHECK (part IN ({_HEAD_PART}, {_BODY_PART})),
    revision INTEGER, status TEXT, cycle_index INTEGER, resume_attempt INTEGER,
    claim_token TEXT, claimed_cycle INTEGER, lease_expires_at_ms INTEGER, terminal INTEGER,
    terminal_acknowledged INTEGER, ambiguous INTEGER, identity TEXT,
    model_journal TEXT, tool_journal TEXT, body BLOB,
    PRIMARY KEY (namespace, key, part)) STRICT""",
    f"""CREATE INDEX {_RUNS}_by_status ON {_RUNS} (namespace, status, key)
    WHERE part = {_HEAD_PART}""",
    f"""CREATE TABLE {_EVENTS} (seq INTEGER PRIMARY KEY, namespace TEXT NOT NULL,
    event_id TEXT NOT NULL, payload_digest TEXT NOT NULL, run_id TEXT, parent_run_id TEXT,
    event BLOB NOT NULL, UNIQUE (namespace, event_id)) STRICT""",
    f"""CREATE INDEX {_EVENTS}_by_run ON {_EVENTS} (namespace, run_id, seq)
    WHERE run_id IS NOT NULL""",
    f"""CREATE INDEX {_EVENTS}_by_parent ON {_EVENTS} (namespace, parent_run_id, seq)
    WHERE parent_run_id IS NOT NULL""",
)
READ_VERSION: Final = f"SELECT value FROM agentflow_meta WHERE key = '{_VERSION_KEY}'"
_STORE_VERSION: Final = f"INSERT INTO agentflow_meta VALUES ('{_VERSION_KEY}', ?)"

_RUN: Final = "namespace = :namespace AND key = :key"
_HEAD_ROW: Final = f"{_RUN} AND part = {_HEAD_PART}"
_BODY_ROW: Final = f"{_RUN} AND part = {_BODY_PART}"

_HEAD_VALUES: Final = ", ".join(f":{name}" for name in (*HEAD_COLUMNS, *_JOURNALS))
_NO_HEAD: Final = ", ".join("NULL" for _ in (*HEAD_COLUMNS, *_JOURNALS))
#: Both rows, or nothing when any row of the key exists.
INSERT_RUN: Final = f"""INSERT INTO {_RUNS} (namespace, key, part, {_HEAD}, model_journal,
    tool_journal, body)
    SELECT * FROM (VALUES (:namespace, :key, {_HEAD_PART}, {_HEAD_VALUES}, NULL),
    (:namespace, :key, {_BODY_PART}, {_NO_HEAD}, :body))
    WHERE NOT EXISTS (SELECT 1 FROM {_RUNS} WHERE {_RUN})"""
#: The head row, then the body row.
LOAD: Final = f"""SELECT part, {_HEAD}, model_journal, tool_journal, body FROM {_RUNS}
    WHERE {_RUN} ORDER BY part"""
HEAD: Final = f"SELECT {_HEAD} FROM {_RUNS} WHERE {_HEAD_ROW}"
BODY: Final = f"SELECT body FROM {_RUNS} WHERE {_BODY_ROW}"
#: What a refused write is told apart by: the head, whether each journal is
#: JSON (a guard holding over a damaged journal), and whether the body row exists.
REFUSED: Final = f"""SELECT {_HEAD}, json_valid(model_journal), json_valid(tool_journal),
    EXISTS (SELECT 1 FROM {_RUNS} WHERE {_BODY_ROW}) FROM {_RUNS} WHERE {_HEAD_ROW}"""
DELETE: Final = f"DELETE FROM {_RUNS} WHERE {_RUN}"

_RUNNING: Final = f"'{CheckpointStatus.RUNNING.value}'"
_CLAIMABLE: Final = f"{_RUNNING}, '{CheckpointStatus.RECONCILIATION_REQUIRED.value}'"
#: The rules of :func:`~agentflow.durable.leases.claim_refusal` and the overflow
#: checks of :func:`~agentflow.durable.leases.claimed_head`, as one guard.
CLAIM: Final = f"""UPDATE {_RUNS} SET revision = revision + 1, status = {_RUNNING},
    resume_attempt = resume_attempt + :recovery, claim_token = :claim_token,
    claimed_cycle = :cycle_index, lease_expires_at_ms = :now + :lease_ms
    WHERE {_HEAD_ROW} AND NOT terminal AND status IN ({_CLAIMABLE})
    AND cycle_index + 1 = :cycle_index
    AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= :now)
    AND (:recovery OR (lease_expires_at_ms IS NULL AND NOT ambiguous AND status = {_RUNNING}))
    AND revision < {MAX_WIRE_INTEGER} AND resume_attempt + :recovery <= {MAX_WIRE_INTEGER}
    AND :now + :lease_ms <= {MAX_WIRE_INTEGER}
    RETURNING {_HEAD}, model_journal, tool_journal"""
#: One integer of the head row; same-sized, so SQLite overwrites the row in place.
RENEW: Final = f"""UPDATE {_RUNS} SET lease_expires_at_ms = :now + :lease_ms
    WHERE {_HEAD_ROW} AND claim_token = :claim_token AND lease_expires_at_ms > :now
    AND :now + :lease_ms <= {MAX_WIRE_INTEGER}
    RETURNING lease_expires_at_ms"""

_SUMMARY: Final = f"SELECT key, {_HEAD} FROM {_RUNS} WHERE namespace = :namespace"
_PAGE: Final = f"part = {_HEAD_PART} AND key > :after ORDER BY key LIMIT :limit"
LIST_AFTER: Final = f"{_SUMMARY} AND {_PAGE}"
LIST_STATUS_AFTER: Final = f"{_SUMMARY} AND status = :status AND {_PAGE}"

INSERT_EVENT: Final = f"""INSERT INTO {_EVENTS}
    (namespace, event_id, payload_digest, run_id, parent_run_id, event)
    VALUES (:namespace, :event_id, :payload_digest, :run_id, :parent_run_id, :event)
    ON CONFLICT (namespace, event_id) DO NOTHING RETURNING seq"""
EVENT_BY_ID: Final = f"""SELECT payload_digest, seq FROM {_EVENTS}
    WHERE namespace = :namespace AND event_id = :event_id"""
_EVENTS_OF: Final = f"""SELECT seq, event_id, payload_digest, event FROM {_EVENTS}
    WHERE namespace = :namespace AND {{member}} = :run_id AND seq > :after"""
REPLAY: Final = f"{_EVENTS_OF.format(member='run_id')} ORDER BY seq LIMIT :limit"
#: Two index ranges merged in sequence order as they are read, stopping at the
#: limit (an event naming the run as both its run and its parent appears once).
REPLAY_FAMILY: Final = f"""{_EVENTS_OF.format(member="run_id")}
    UNION {_EVENTS_OF.format(member="parent_run_id")} ORDER BY seq LIMIT :limit"""


def ensure_schema(conn: sqlite3.Connection) -> object:
    """Create the durable tables in a file that has none; return the version it holds.

    Runs inside the writer's transaction, so processes opening a file at
    once create the tables exactly once. A file of another version is left
    as it is (the caller refuses a newer one).
    """
    rows = conn.execute(READ_VERSION).fetchall()
    if rows:
        found: object = rows[0][0]
        return found
    for statement in _DDL:
        conn.execute(statement)
    conn.execute(_STORE_VERSION, (DURABLE_SCHEMA_VERSION,))
    return DURABLE_SCHEMA_VERSION


@lru_cache(maxsize=64)
def write_statement(
    *,
    body: bool,
    keep_lease: bool,
    journal: str | None,
    claimed_cycle: bool,
    resume_attempt: bool,
    terminal_acknowledged: bool,
) -> str:
    """The ``UPDATE`` of one planned write, named by its shape.

    ``journal`` is None, ``"replace"`` (both journals), or the column one
    entry is put into (``:entry`` at the JSON path ``:entry_path``). A write
    with a body changes both rows (each column takes its new value on its own
    row, NULL on the other); any other write changes the head row alone. The
    optional guard terms are those a :class:`~agentflow.durable.transitions.Guard`
    sets. ``RETURNING`` gives each changed row's part and the head's lease.
    """
    values = {name: f":{name}" for name in HEAD_COLUMNS}
    if keep_lease:
        del values["lease_expires_at_ms"]
    if journal == "replace":
        values.update({name: f":{name}" for name in _JOURNALS})
    elif journal is not None:
        values[journal] = f"json_set({journal}, :entry_path, json(:entry))"
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
    if journal in _JOURNALS:
        guard.append(f"json_valid({journal})")
    held = " AND ".join(guard)
    if not body:
        sets = ", ".join(f"{name} = {value}" for name, value in values.items())
        return f"""UPDATE {_RUNS} SET {sets} WHERE {_HEAD_ROW} AND {held}
            RETURNING part, lease_expires_at_ms"""
    on_head = [
        f"{name} = iif(part = {_HEAD_PART}, {value}, NULL)" for name, value in values.items()
    ]
    sets = ", ".join([*on_head, f"body = iif(part = {_BODY_PART}, :body, NULL)"])
    return f"""UPDATE {_RUNS} SET {sets} WHERE {_RUN}
        AND EXISTS (SELECT 1 FROM {_RUNS} WHERE {_HEAD_ROW} AND {held})
        AND EXISTS (SELECT 1 FROM {_RUNS} WHERE {_BODY_ROW})
        RETURNING part, lease_expires_at_ms"""
