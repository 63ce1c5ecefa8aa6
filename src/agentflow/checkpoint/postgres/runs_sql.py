"""The statements of a PostgreSQL store's records and events.

A run is a **head** row (the :class:`~agentflow.checkpoint.rows.RunHead` columns),
a **body** row in a table of its own, and one **journal** row per operation
(``kind``, ``idx``: its place in that kind's journal). PostgreSQL writes a new
version of every row an ``UPDATE`` touches, so with the body and the journal
beside the head, a claim, a renewal or an acknowledgement writes one small head
row, and a journal transition the head row and one journal row; only writes
that change the body write it. Body and journal rows reference their head
(``ON DELETE CASCADE``), so a delete removes the whole run.

Every write is one statement: a data-modifying ``WITH`` whose first part is
the guarded ``UPDATE`` of the head (the whole guard in its ``WHERE``) and whose
other parts write the body, the journal rows and the thread summary's run
status ``FROM`` it, so they write only if the head did. A step's commit adds
the checkpoint put to the same statement. Leases are compared with ``now``, the
server's ``clock_timestamp()`` read once per statement.

Statement text uses ``:name`` placeholders, numbered ``$n`` by :class:`Statement`.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, fields
from typing import Any, Final

from agentflow.checkpoint.postgres.sql import checkpoint_statements, summary_upsert, table_names
from agentflow.checkpoint.rows import RunHead
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

__all__ = [
    "HEAD_COLUMNS",
    "HEAD_OF",
    "JOURNAL_OF",
    "NOW",
    "RUN_STATEMENTS",
    "PostgresPart",
    "Statement",
    "Statements",
]

#: The head columns: the fields of :class:`~agentflow.checkpoint.rows.RunHead`, in order.
HEAD_COLUMNS: Final = tuple(field.name for field in fields(RunHead))
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
    """Which parts a planned write's statement has (see :func:`write_text`)."""

    body: bool
    keep_lease: bool
    journal: str | None  # None, "puts" (entries at their places) or "replace" (both journals)
    claimed_cycle: bool
    resume_attempt: bool
    terminal_acknowledged: bool
    #: A step's commit: the checkpoint put rides the statement.
    step: bool = False


NOW: Final = "(SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms)"
_RUN: Final = "namespace = :namespace AND key = :key"
_HEAD: Final = ", ".join(HEAD_COLUMNS)
HEAD_OF: Final = ", ".join(f"{{of}}.{name}" for name in HEAD_COLUMNS)
_RUNNING: Final = f"'{CheckpointStatus.RUNNING.value}'"
_CLAIMABLE: Final = f"{_RUNNING}, '{CheckpointStatus.RECONCILIATION_REQUIRED.value}'"
#: The thread summary follows the record's status (skipped when it already does).
_SUMMARY_RUN_STATUS: Final = """summary AS (UPDATE {{threads}} t SET run_status = {value}
    FROM {source} WHERE t.namespace = :namespace AND t.thread = :key
    AND t.run_status IS DISTINCT FROM {value})"""
_ENTRIES: Final = "unnest(:kinds::text[], :idxs::int[], :entries::bytea[]) AS e(kind, idx, entry)"
#: Every journal row of a run in one scan: kinds, places and entries, in order.
JOURNAL_OF: Final = """LEFT JOIN LATERAL (SELECT array_agg(j.kind ORDER BY j.kind, j.idx) AS kinds,
        array_agg(j.idx ORDER BY j.kind, j.idx) AS idxs,
        array_agg(j.entry ORDER BY j.kind, j.idx) AS entries
    FROM {{journal}} j WHERE j.namespace = :namespace AND j.key = {of}) AS j ON true"""
#: A delete of the record, refused (deleting nothing) while its lease is live
#: unless ``:force``; the row lock makes a racing claim or renewal go first.
_RUN_GONE: Final = f"""now AS {NOW},
    run AS (SELECT lease_expires_at_ms AS lease FROM {{runs}} WHERE {_RUN} FOR UPDATE),
    live AS (SELECT FROM run, now WHERE NOT :force::boolean AND run.lease > now.ms),
    gone AS (DELETE FROM {{runs}} WHERE {_RUN} AND NOT EXISTS (SELECT FROM live) RETURNING 1)"""

RUN_STATEMENTS: Final = {
    # Head, body and entries, or nothing when the key exists.
    "create": f"""WITH head AS (
        INSERT INTO {{runs}} (namespace, key, {_HEAD}, definition)
        VALUES (:namespace, :key, {", ".join(f":{name}" for name in HEAD_COLUMNS)}, :definition)
        ON CONFLICT (namespace, key) DO NOTHING RETURNING namespace, key
    ), body AS (
        INSERT INTO {{bodies}} (namespace, key, body) SELECT namespace, key, :body::bytea FROM head
    ), entries AS (
        INSERT INTO {{journal}} (namespace, key, kind, idx, entry)
        SELECT head.namespace, head.key, e.kind, e.idx, e.entry FROM head, {_ENTRIES}
    ), {_SUMMARY_RUN_STATUS.format(value=":run_status::text", source="head")}
    SELECT count(*) FROM head""",
    "load": f"""SELECT {HEAD_OF.format(of="r")}, b.body, j.kinds, j.idxs, j.entries
        FROM {{runs}} r LEFT JOIN {{bodies}} b ON b.namespace = r.namespace AND b.key = r.key
        {JOURNAL_OF.format(of="r.key")}
        WHERE r.namespace = :namespace AND r.key = :key""",
    # The rules of claim_refusal and the overflow checks of claimed_head as one
    # guard. ``seen`` is the head in the statement's snapshot: when it is the
    # revision before the claim, the body and journal read beside it are the
    # claimed record's (a writer that committed while the claim waited for the
    # row would have moved the revision). A claim leaves the record running.
    "claim": f"""WITH now AS {NOW}, seen AS (SELECT revision FROM {{runs}} WHERE {_RUN}),
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
        RETURNING {HEAD_OF.format(of="r")}, r.key
    ), {_SUMMARY_RUN_STATUS.format(value="NULL::text", source="claimed")}
    SELECT now.ms, seen.revision, {HEAD_OF.format(of="c")}, b.body, j.kinds, j.idxs, j.entries
        FROM now LEFT JOIN claimed c ON true LEFT JOIN seen ON true
        LEFT JOIN {{bodies}} b ON b.namespace = :namespace AND b.key = c.key
        {JOURNAL_OF.format(of="c.key")}""",
    # One column; not indexed, so PostgreSQL can keep the new version on the page (HOT).
    "renew": f"""WITH now AS {NOW}, renewed AS (
        UPDATE {{runs}} r SET lease_expires_at_ms = now.ms + :lease_ms
        FROM now WHERE r.namespace = :namespace AND r.key = :key
            AND r.claim_token = :claim_token AND r.lease_expires_at_ms > now.ms
            AND now.ms + :lease_ms <= {MAX_WIRE_INTEGER}
        RETURNING r.lease_expires_at_ms
    ) SELECT now.ms, renewed.lease_expires_at_ms FROM now LEFT JOIN renewed ON true""",
    # What a refused write is told apart by: the head, and whether the body exists.
    "refused": f"""SELECT {_HEAD}, EXISTS (SELECT 1 FROM {{bodies}} WHERE {_RUN})
        FROM {{runs}} WHERE {_RUN}""",
    "delete_run": f"""WITH {_RUN_GONE},
        {_SUMMARY_RUN_STATUS.format(value="NULL::text", source="gone")}
        SELECT EXISTS (SELECT FROM live), EXISTS (SELECT FROM gone)""",
    # The record, its events and its steps; the summary follows in the same
    # transaction (see the store's _delete_thread).
    "delete_thread": f"""WITH {_RUN_GONE},
        events AS (DELETE FROM {{events}} WHERE namespace = :namespace AND run_id = :key
            AND NOT EXISTS (SELECT FROM live) RETURNING 1),
        steps AS (DELETE FROM {{cp}} WHERE namespace = :namespace AND thread = :key
            AND NOT EXISTS (SELECT FROM live) RETURNING 1)
        SELECT EXISTS (SELECT FROM live),
            EXISTS (SELECT FROM gone) OR EXISTS (SELECT FROM events),
            EXISTS (SELECT FROM steps)""",
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
    "delete_events": """WITH gone AS (DELETE FROM {events}
        WHERE namespace = :namespace AND run_id = :run_id RETURNING 1) SELECT count(*) FROM gone""",
    "rewrite_event": """UPDATE {events} SET event = :event
        WHERE namespace = :namespace AND event_id = :event_id RETURNING true""",
}

#: A step's checkpoint and summary, written only if the head was (see
#: :func:`write_text`): the put binds the step's columns by name.
_STEP: Final = (
    "written AS (INSERT INTO {cp} (namespace, thread, step, revision, ts_us, interrupted,"
    " done, ts, wake_at, payload, wake_us) SELECT :namespace, :key, :cp_step::bigint, 1,"
    " :cp_ts_us::bigint, :cp_interrupted::boolean, :cp_done::boolean, :cp_ts::text,"
    " :cp_wake_at::text, :cp_payload::bytea, :cp_wake_us::bigint FROM head RETURNING 1),"
    " summary AS ("
    + summary_upsert(
        "SELECT :namespace, :key, :cp_step, :cp_interrupted, :cp_done, :cp_ts, :cp_wake_at,"
        " :cp_status::text, :cp_wake_us, :run_status::text FROM written",
        run_status=True,
    )
    # An older step leaves the summary (and the run status, which the record
    # writes a step commits never change) on the newest.
    + " WHERE t.latest_step <= EXCLUDED.latest_step)"
)


def _guard(shape: WriteShape) -> list[str]:
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
    if shape.step:  # the step is new: one that exists is the caller's conflict
        guard.append("NOT EXISTS (SELECT FROM existing)")
    return guard


def write_text(shape: WriteShape) -> str:
    """The named text of one planned write.

    The head ``UPDATE`` sets every head column (but the lease when
    ``keep_lease``) and carries the guard terms the write's
    :class:`~agentflow.checkpoint.plans.Guard` sets; a write with a body
    also requires the body row (a guard holding over a missing body is
    damage, reported by the caller). ``journal`` ``"puts"`` upserts the rows
    ``:kinds``/``:idxs``/``:entries``; ``"replace"`` makes both journals those
    rows. A ``step`` write also requires the step ``:cp_step`` to be absent, puts
    it and moves the summary; it returns that step's stored revision.
    """
    columns = [n for n in HEAD_COLUMNS if not (shape.keep_lease and n == "lease_expires_at_ms")]
    sets = ", ".join(f"{name} = :{name}" for name in columns)
    parts = []
    if shape.step:
        parts.append(
            "existing AS (SELECT revision FROM {cp}"
            " WHERE namespace = :namespace AND thread = :key AND step = :cp_step)"
        )
    parts.append(
        f"head AS (UPDATE {{runs}} SET {sets} WHERE {_RUN} AND {' AND '.join(_guard(shape))}"
        " RETURNING lease_expires_at_ms)"
    )
    if shape.body:
        parts.append(f"body AS (UPDATE {{bodies}} SET body = :body FROM head WHERE {_RUN})")
    upsert = "ON CONFLICT (namespace, key, kind, idx) DO UPDATE SET entry = EXCLUDED.entry"
    insert = "INSERT INTO {journal} (namespace, key, kind, idx, entry)"
    if shape.journal == "puts":
        parts.append(
            f"entry AS ({insert} SELECT :namespace, :key, e.kind, e.idx, e.entry"
            f" FROM head, {_ENTRIES} {upsert})"
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
            f" {_ENTRIES} WHERE NOT EXISTS (SELECT 1 FROM {{journal}} j"
            " WHERE j.namespace = :namespace AND j.key = :key AND j.kind = e.kind"
            f" AND j.idx = e.idx AND j.entry = e.entry) {upsert})"
        )
    if shape.step:
        parts.append(_STEP)
    else:  # a step's summary upsert sets the run status itself
        parts.append(_SUMMARY_RUN_STATUS.format(value=":run_status::text", source="head"))
    found = ", (SELECT revision FROM existing)" if shape.step else ""
    return (
        "WITH "
        + ", ".join(parts)
        + f" SELECT EXISTS (SELECT FROM head), (SELECT lease_expires_at_ms FROM head){found}"
    )


class Statements:
    """Every statement of one store's tables (``table`` and ``schema``, checked)."""

    def __init__(self, table: str, schema: str | None) -> None:
        self.names = table_names(table, schema)
        #: The checkpoint statements ($n parameters), by name.
        self.cp = checkpoint_statements(self.names)
        #: The record and event statements (named parameters), by name.
        self.runs = {
            name: Statement.of(text.format(**self.names)) for name, text in RUN_STATEMENTS.items()
        }
        self._writes: dict[WriteShape, Statement] = {}

    def write(self, shape: WriteShape) -> Statement:
        """The one statement of a planned write of this shape (see :func:`write_text`)."""
        statement = self._writes.get(shape)
        if statement is None:
            text = write_text(shape).format(**self.names)
            statement = self._writes[shape] = Statement.of(text)
        return statement


class PostgresPart(abc.ABC):
    """What the record and event parts of the store share: its statements and
    the one way they run one (on a kept connection, driver errors mapped)."""

    _namespace: str
    _sql: Statements

    @abc.abstractmethod
    async def _fetch(
        self, operation: str, method: str, statement: str | Statement, params: dict[str, Any]
    ) -> Any:
        """``conn.<method>`` (``fetch``, ``fetchrow``, ``fetchval``) of ``statement``
        (a name of :data:`RUN_STATEMENTS`, or a built one) with ``params``;
        ``operation`` (a public method's name) names it in errors."""
