"""The tables and statements of the PostgreSQL durable store, beside the checkpointer's.

A run is a **head** row (the :class:`~agentflow.durable.rows.RunHead` columns),
a **body** row in a table of its own, and one **journal** row per operation
(``kind``, ``idx``: its place in that kind's journal). PostgreSQL writes a new
version of every row an ``UPDATE`` touches, so with the body and the journal
beside the head, a claim, a renewal or an acknowledgement writes one small head
row, and a journal transition the head row and one journal row; only writes
that change the body write it. Body and journal rows reference their head
(``ON DELETE CASCADE``), so a delete removes the whole run even while a
concurrent write adds an entry.

Every write is one statement: a data-modifying ``WITH`` whose first part is
the guarded ``UPDATE`` of the head (the whole guard in its ``WHERE``) and whose
other parts write the body and the journal rows ``FROM`` it, so they write
only if the head did. ``RETURNING`` tells the caller whether it applied.
Leases are compared with ``now``, the server's ``clock_timestamp()`` read
once per statement.

Statement text uses ``:name`` placeholders, numbered ``$n`` by :class:`Statement`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Final

from agentflow.checkpoint.postgres.sql import statements as checkpoint_statements
from agentflow.durable.canonical import MAX_WIRE_INTEGER
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.rows import RunHead
from agentflow.errors import InvalidArgument

__all__ = ["DURABLE_SCHEMA_VERSION", "HEAD_COLUMNS", "DurableSql", "Statement", "WriteShape"]

#: Version of the durable tables, kept in the checkpointer's meta table as component ``durable``.
DURABLE_SCHEMA_VERSION: Final = 1
#: The head columns: the fields of :class:`~agentflow.durable.rows.RunHead`, in order.
HEAD_COLUMNS: Final = tuple(field.name for field in fields(RunHead))
_SUFFIXES: Final = {
    "runs": "_durable_runs",
    "bodies": "_durable_bodies",
    "journal": "_durable_journal",
    "events": "_durable_events",
}
_MAX_IDENTIFIER: Final = 63
_PLACEHOLDER: Final = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


@dataclass(frozen=True, slots=True)
class Statement:
    """SQL text with ``$n`` parameters and the names they bind, in order."""

    text: str
    names: tuple[str, ...]

    @classmethod
    def of(cls, named: str) -> Statement:
        """Number the ``:name`` placeholders of ``named`` (one ``$n`` per distinct name)."""
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in names:
                names.append(name)
            return f"${names.index(name) + 1}"

        return cls(_PLACEHOLDER.sub(number, named), tuple(names))

    def args(self, params: dict[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]


@dataclass(frozen=True, slots=True)
class WriteShape:
    """Which parts a planned write's statement has (see :meth:`DurableSql.write`)."""

    body: bool
    keep_lease: bool
    journal: str | None  # None, "put" (one entry) or "replace" (both journals)
    claimed_cycle: bool
    resume_attempt: bool
    terminal_acknowledged: bool


_NOW: Final = "(SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms)"
_RUN: Final = "namespace = :namespace AND key = :key"
_HEAD: Final = ", ".join(HEAD_COLUMNS)
_RUNNING: Final = f"'{CheckpointStatus.RUNNING.value}'"
_CLAIMABLE: Final = f"{_RUNNING}, '{CheckpointStatus.RECONCILIATION_REQUIRED.value}'"

_DDL: Final = """
CREATE TABLE {runs} (
    namespace TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL,
    revision BIGINT NOT NULL, status TEXT COLLATE "C" NOT NULL, cycle_index BIGINT NOT NULL,
    resume_attempt BIGINT NOT NULL, claim_token TEXT, claimed_cycle BIGINT,
    lease_expires_at_ms BIGINT, terminal BOOLEAN NOT NULL, terminal_acknowledged BOOLEAN NOT NULL,
    ambiguous BOOLEAN NOT NULL, identity TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
) WITH (fillfactor = 70);
CREATE INDEX ON {runs} (namespace, status, key);
CREATE TABLE {bodies} (
    namespace TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL, body BYTEA NOT NULL,
    PRIMARY KEY (namespace, key),
    FOREIGN KEY (namespace, key) REFERENCES {runs} ON DELETE CASCADE
);
CREATE TABLE {journal} (
    namespace TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL, idx INTEGER NOT NULL, entry BYTEA NOT NULL,
    PRIMARY KEY (namespace, key, kind, idx),
    FOREIGN KEY (namespace, key) REFERENCES {runs} ON DELETE CASCADE
);
CREATE TABLE {events} (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace TEXT COLLATE "C" NOT NULL, event_id TEXT COLLATE "C" NOT NULL,
    payload_digest TEXT NOT NULL, run_id TEXT COLLATE "C", parent_run_id TEXT COLLATE "C",
    event BYTEA NOT NULL,
    UNIQUE (namespace, event_id)
);
CREATE INDEX ON {events} (namespace, run_id, seq) WHERE run_id IS NOT NULL;
CREATE INDEX ON {events} (namespace, parent_run_id, seq) WHERE parent_run_id IS NOT NULL;
"""
_USE_LZ4: Final = """
ALTER TABLE {bodies} ALTER COLUMN body SET COMPRESSION lz4;
ALTER TABLE {events} ALTER COLUMN event SET COMPRESSION lz4;
"""

#: Every journal row of a run in one scan: kinds, places and entries, in order.
_JOURNAL_OF: Final = """LEFT JOIN LATERAL (SELECT array_agg(j.kind ORDER BY j.kind, j.idx) AS kinds,
        array_agg(j.idx ORDER BY j.kind, j.idx) AS idxs,
        array_agg(j.entry ORDER BY j.kind, j.idx) AS entries
    FROM {journal} j WHERE j.namespace = :namespace AND j.key = {of}) AS j ON true"""
_HEAD_OF: Final = ", ".join(f"{{of}}.{name}" for name in HEAD_COLUMNS)

_FIXED: Final = {
    "read_version": "SELECT version FROM {meta} WHERE component = 'durable'",
    "record_version": "INSERT INTO {meta} (component, version) VALUES ('durable', :version)",
    # Head, body and entries, or nothing when the key exists.
    "create": f"""WITH head AS (
        INSERT INTO {{runs}} (namespace, key, {_HEAD})
        VALUES (:namespace, :key, {", ".join(f":{name}" for name in HEAD_COLUMNS)})
        ON CONFLICT (namespace, key) DO NOTHING RETURNING namespace, key
    ), body AS (
        INSERT INTO {{bodies}} (namespace, key, body) SELECT namespace, key, :body::bytea FROM head
    ), entries AS (
        INSERT INTO {{journal}} (namespace, key, kind, idx, entry)
        SELECT head.namespace, head.key, e.kind, e.idx, e.entry FROM head,
            unnest(:kinds::text[], :idxs::int[], :entries::bytea[]) AS e(kind, idx, entry)
    ) SELECT count(*) FROM head""",
    "load": f"""SELECT {_HEAD_OF.format(of="r")}, b.body, j.kinds, j.idxs, j.entries
        FROM {{runs}} r LEFT JOIN {{bodies}} b ON b.namespace = r.namespace AND b.key = r.key
        {_JOURNAL_OF.format(journal="{journal}", of="r.key")}
        WHERE r.namespace = :namespace AND r.key = :key""",
    # The rules of claim_refusal and the overflow checks of claimed_head as one
    # guard. ``seen`` is the head in the statement's snapshot: when it is the
    # revision before the claim, the body and journal read beside it are the
    # claimed record's (a writer that committed while the claim waited for the
    # row would have moved the revision).
    "claim": f"""WITH now AS {_NOW}, seen AS (SELECT revision FROM {{runs}} WHERE {_RUN}),
    claimed AS (
        UPDATE {{runs}} r SET revision = r.revision + 1, status = {_RUNNING},
            resume_attempt = r.resume_attempt + :recovery, claim_token = :claim_token,
            claimed_cycle = :cycle_index, lease_expires_at_ms = now.ms + :lease_ms
        FROM now WHERE r.namespace = :namespace AND r.key = :key
            AND NOT r.terminal AND r.status IN ({_CLAIMABLE}) AND r.cycle_index + 1 = :cycle_index
            AND (r.lease_expires_at_ms IS NULL OR r.lease_expires_at_ms <= now.ms)
            AND (:recovery = 1
                 OR (r.lease_expires_at_ms IS NULL AND NOT r.ambiguous AND r.status = {_RUNNING}))
            AND r.revision < {MAX_WIRE_INTEGER}
            AND r.resume_attempt + :recovery <= {MAX_WIRE_INTEGER}
            AND now.ms + :lease_ms <= {MAX_WIRE_INTEGER}
        RETURNING {_HEAD_OF.format(of="r")}, r.key
    ) SELECT now.ms, seen.revision, {_HEAD_OF.format(of="c")}, b.body, j.kinds, j.idxs, j.entries
        FROM now LEFT JOIN claimed c ON true LEFT JOIN seen ON true
        LEFT JOIN {{bodies}} b ON b.namespace = :namespace AND b.key = c.key
        {_JOURNAL_OF.format(journal="{journal}", of="c.key")}""",
    # One column; not indexed, so PostgreSQL can keep the new version on the page (HOT).
    "renew": f"""WITH now AS {_NOW}, renewed AS (
        UPDATE {{runs}} r SET lease_expires_at_ms = now.ms + :lease_ms
        FROM now WHERE r.namespace = :namespace AND r.key = :key
            AND r.claim_token = :claim_token AND r.lease_expires_at_ms > now.ms
            AND now.ms + :lease_ms <= {MAX_WIRE_INTEGER}
        RETURNING r.lease_expires_at_ms
    ) SELECT now.ms, renewed.lease_expires_at_ms FROM now LEFT JOIN renewed ON true""",
    # What a refused write is told apart by: the head, and whether the body exists.
    "refused": f"""SELECT {_HEAD}, EXISTS (SELECT 1 FROM {{bodies}} WHERE {_RUN})
        FROM {{runs}} WHERE {_RUN}""",
    "delete": f"DELETE FROM {{runs}} WHERE {_RUN} RETURNING true",
    "list_after": f"""SELECT key, {_HEAD} FROM {{runs}} WHERE namespace = :namespace
        AND key > :after ORDER BY key LIMIT :limit""",
    "list_status_after": f"""SELECT key, {_HEAD} FROM {{runs}} WHERE namespace = :namespace
        AND status = :status AND key > :after ORDER BY key LIMIT :limit""",
    # The appender takes the transaction locks of the event's run and parent
    # (sorted, so two appenders never deadlock) before the insert draws its
    # sequence number. Every event a replay range holds took its run's lock,
    # so within a range sequence order is commit order, and a replay cursor
    # never passes an event that commits later with a smaller number.
    "append": """WITH locked AS (
        SELECT count(pg_advisory_xact_lock(k))
        FROM (VALUES (:first_lock::bigint), (:second_lock::bigint)) AS l(k) WHERE k IS NOT NULL
    ), added AS (
        INSERT INTO {events} (namespace, event_id, payload_digest, run_id, parent_run_id, event)
        SELECT :namespace::text, :event_id::text, :payload_digest::text, :run_id::text,
            :parent_run_id::text, :event::bytea FROM locked
        ON CONFLICT (namespace, event_id) DO NOTHING RETURNING seq
    ) SELECT NULL AS payload_digest, seq FROM added
    UNION ALL SELECT payload_digest, seq FROM {events}
        WHERE namespace = :namespace AND event_id = :event_id AND NOT EXISTS (SELECT FROM added)""",
    "event_by_id": """SELECT payload_digest, seq FROM {events}
        WHERE namespace = :namespace AND event_id = :event_id""",
    "replay": """SELECT seq, event_id, payload_digest, event FROM {events}
        WHERE namespace = :namespace AND run_id = :run_id AND seq > :after
        ORDER BY seq LIMIT :limit""",
    # Two index ranges, each cut at the page, merged by sequence; an event
    # naming the run as both its run and its parent appears once.
    "replay_family": """SELECT DISTINCT ON (seq) seq, event_id, payload_digest, event FROM (
        (SELECT seq, event_id, payload_digest, event FROM {events}
            WHERE namespace = :namespace AND run_id = :run_id AND seq > :after
            ORDER BY seq LIMIT :limit)
        UNION ALL
        (SELECT seq, event_id, payload_digest, event FROM {events}
            WHERE namespace = :namespace AND parent_run_id = :run_id AND seq > :after
            ORDER BY seq LIMIT :limit)
    ) AS family ORDER BY seq LIMIT :limit""",
}


def _write_text(shape: WriteShape) -> str:
    """The named text of one planned write (see :meth:`DurableSql.write`)."""
    columns = [n for n in HEAD_COLUMNS if not (shape.keep_lease and n == "lease_expires_at_ms")]
    sets = ", ".join(f"{name} = :{name}" for name in columns)
    guard = [
        "revision = :g_revision",
        "claim_token IS NOT DISTINCT FROM :g_claim_token::text",
        "terminal = :g_terminal",
        "identity = :g_identity",
    ]
    for name, wanted in (
        ("claimed_cycle", shape.claimed_cycle),
        ("resume_attempt", shape.resume_attempt),
        ("terminal_acknowledged", shape.terminal_acknowledged),
    ):
        if wanted:
            guard.append(f"{name} IS NOT DISTINCT FROM :g_{name}")
    if shape.body:
        guard.append("EXISTS (SELECT 1 FROM {bodies} WHERE " + _RUN + ")")
    parts = [
        f"head AS (UPDATE {{runs}} SET {sets} WHERE {_RUN} AND {' AND '.join(guard)}"
        " RETURNING lease_expires_at_ms)"
    ]
    if shape.body:
        parts.append(f"body AS (UPDATE {{bodies}} SET body = :body FROM head WHERE {_RUN})")
    upsert = "ON CONFLICT (namespace, key, kind, idx) DO UPDATE SET entry = EXCLUDED.entry"
    insert = "INSERT INTO {journal} (namespace, key, kind, idx, entry)"
    if shape.journal == "put":
        parts.append(
            f"entry AS ({insert} SELECT :namespace, :key, :kind::text, :idx::int,"
            f" :entry::bytea FROM head {upsert})"
        )
    elif shape.journal == "replace":
        # Rows past each new length go; the others are upserted, but for those
        # stored already (not even locked: a progress that keeps the journals
        # writes no journal row). The two sets are disjoint, so no row is
        # touched twice by the one statement.
        parts.append(
            "trimmed AS (DELETE FROM {journal} j USING head"
            " WHERE j.namespace = :namespace AND j.key = :key"
            " AND j.idx >= CASE WHEN j.kind = 'model' THEN :model_count::int"
            " ELSE :tool_count::int END)"
        )
        parts.append(
            f"filled AS ({insert} SELECT :namespace, :key, e.kind, e.idx, e.entry FROM head,"
            " unnest(:kinds::text[], :idxs::int[], :entries::bytea[]) AS e(kind, idx, entry)"
            " WHERE NOT EXISTS (SELECT 1 FROM {journal} j WHERE j.namespace = :namespace"
            " AND j.key = :key AND j.kind = e.kind AND j.idx = e.idx AND j.entry = e.entry)"
            f" {upsert})"
        )
    return "WITH " + ", ".join(parts) + " SELECT lease_expires_at_ms FROM head"


class DurableSql:
    """The statements of one table set (``<table>_durable_*`` beside ``<table>``).

    ``table`` and ``schema`` are checked as the checkpointer checks them;
    the longest durable name must also fit PostgreSQL's 63-byte identifiers
    (a longer one would be truncated and could collide).
    """

    def __init__(self, table: str, schema: str | None) -> None:
        names, checkpoint_sql = checkpoint_statements(table, schema)
        longest = max(len(suffix) for suffix in _SUFFIXES.values())
        if len(table) + longest > _MAX_IDENTIFIER:
            raise InvalidArgument(
                f"table must be at most {_MAX_IDENTIFIER - longest} characters for the"
                f" durable tables' names to fit, got {len(table)}"
            )
        base = names["cp"][:-1]  # '"schema"."table' without the closing quote
        self.names = {
            "meta": names["meta"],
            **{part: f'{base}{suffix}"' for part, suffix in _SUFFIXES.items()},
        }
        self.table = names["cp"]
        self.checkpoint_sql = checkpoint_sql
        self.create = _DDL.format(**self.names)
        self.use_lz4 = _USE_LZ4.format(**self.names)
        self.fixed = {
            name: Statement.of(text.format(**self.names)) for name, text in _FIXED.items()
        }
        self._writes: dict[WriteShape, Statement] = {}

    def write(self, shape: WriteShape) -> Statement:
        """The one statement of a planned write of this shape.

        The head ``UPDATE`` sets every head column (but the lease when
        ``keep_lease``) and carries the guard terms the write's
        :class:`~agentflow.durable.transitions.Guard` sets; a write with a body
        also requires the body row (a guard holding over a missing body is
        damage, reported by the caller). ``journal`` is ``"put"`` (``:entry``
        at ``:idx`` of ``:kind``) or ``"replace"`` (both journals).
        """
        statement = self._writes.get(shape)
        if statement is None:
            statement = self._writes[shape] = Statement.of(_write_text(shape).format(**self.names))
        return statement
