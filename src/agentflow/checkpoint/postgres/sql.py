"""The SQL of the PostgreSQL backend: table names, checked and quoted, and the
text of every statement it runs.

Names are validated rather than escaped, so a table in psql is spelled the same
way it was passed; values are never spliced into the text.
"""

from __future__ import annotations

import re

from agentflow.errors import InvalidArgument

__all__ = ["LZ4_AVAILABLE", "SETUP_LOCK_KEY", "statements"]

#: Lowercase only, so a quoted name means the same as the unquoted one a human
#: types in psql; short enough that ``<table>_threads`` fits PostgreSQL's 63 bytes.
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,54}")

_SUFFIXES = {"cp": "", "threads": "_threads", "meta": "_meta"}

#: One advisory-lock key ("afsetup1") for every agentflow schema change in a
#: database: setup is rare, and one key also serialises CREATE SCHEMA races.
SETUP_LOCK_KEY = 0x6166_7365_7475_7031

# {cp}, {threads}, {meta} become validated identifiers, always double-quoted;
# every value is a $n parameter. A put binds $1 namespace, $2 thread, $3 step,
# $4 ts_us, $5 interrupted, $6 done, $7 ts, $8 wake_at, $9 payload, $10 wake_us,
# $11 expected revision.


def _status(done: str, interrupted: str, wake_at: str) -> str:
    """A thread's status from its latest step's columns, as ThreadInfo.status defines it."""
    return (
        f"CASE WHEN {done} THEN 'done' WHEN NOT {interrupted} THEN 'running'"
        f" WHEN {wake_at} IS NULL THEN 'interrupted' ELSE 'waiting' END"
    )


_STATUS = _status("done", "interrupted", "wake_at")
#: The summary's status and due indexes (unnamed: PostgreSQL picks names that
#: fit in 63 bytes and collide with nothing).
_INDEXES = """
CREATE INDEX ON {threads} (namespace, status, thread);
CREATE INDEX ON {threads} (namespace, wake_us, thread) WHERE status = 'waiting';
"""
# Columns added after the first version come last, in the order the migration
# adds them, so a migrated table and a new one have the same shape.
_CREATE = (
    """
CREATE TABLE IF NOT EXISTS {meta} (
    component TEXT PRIMARY KEY, version INTEGER NOT NULL, value BYTEA
);
CREATE TABLE IF NOT EXISTS {cp} (
    namespace TEXT COLLATE "C" NOT NULL, thread TEXT COLLATE "C" NOT NULL,
    step BIGINT NOT NULL, revision BIGINT NOT NULL, ts_us BIGINT NOT NULL, ts TEXT NOT NULL,
    interrupted BOOLEAN NOT NULL, done BOOLEAN NOT NULL, wake_at TEXT, payload BYTEA NOT NULL,
    wake_us BIGINT,
    PRIMARY KEY (namespace, thread, step)
);
CREATE TABLE IF NOT EXISTS {threads} (
    namespace TEXT COLLATE "C" NOT NULL, thread TEXT COLLATE "C" NOT NULL,
    latest_step BIGINT NOT NULL, interrupted BOOLEAN NOT NULL, done BOOLEAN NOT NULL,
    ts TEXT NOT NULL, wake_at TEXT, status TEXT COLLATE "C" NOT NULL, wake_us BIGINT,
    PRIMARY KEY (namespace, thread)
) WITH (fillfactor = 70);
"""
    + _INDEXES
)
#: Version 1 to 2: the summary keeps its status and wake instant, indexed, for
#: the status filter and list_due; the meta table holds the cursor secret. The
#: wake instants of existing rows are parsed in Python (``wake_timers``, then
#: ``set_wake``), since only Python's parser reads every ISO form we accepted,
#: and copied to the summaries (``summary_wake``).
_TO_V2 = {
    "add_columns": """
        ALTER TABLE {meta} ADD COLUMN value BYTEA;
        ALTER TABLE {cp} ADD COLUMN wake_us BIGINT;
        ALTER TABLE {threads} ADD COLUMN status TEXT COLLATE "C" NOT NULL DEFAULT 'running',
            ADD COLUMN wake_us BIGINT;
        UPDATE {threads} SET status = """
    + _STATUS
    + """ WHERE done OR interrupted;
        ALTER TABLE {threads} ALTER COLUMN status DROP DEFAULT;
    """
    + _INDEXES,
    "wake_timers": "SELECT namespace, thread, step, wake_at FROM {cp} WHERE wake_at IS NOT NULL",
    "set_wake": "UPDATE {cp} SET wake_us = $4 WHERE namespace = $1 AND thread = $2 AND step = $3",
    "summary_wake": """UPDATE {threads} AS t SET wake_us = c.wake_us FROM {cp} AS c
        WHERE t.wake_at IS NOT NULL AND c.namespace = t.namespace AND c.thread = t.thread
            AND c.step = t.latest_step""",
}

_KEY = "namespace = $1 AND thread = $2"
_ROW = "SELECT step, revision, payload FROM {cp} WHERE " + _KEY
_INFO = "SELECT thread, latest_step, interrupted, done, ts, wake_at FROM {threads}"
_INSERT = """INSERT INTO {cp} AS c (namespace, thread, step, revision, ts_us, interrupted,
        done, ts, wake_at, payload, wake_us)
    VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (namespace, thread, step)"""
_CHANGED = (
    "ts_us = $4, interrupted = $5, done = $6, ts = $7, wake_at = $8, payload = $9, wake_us = $10"
)
_SUMMARY = """INSERT INTO {{threads}} AS t
        (namespace, thread, latest_step, interrupted, done, ts, wake_at, status, wake_us) {rows}
    ON CONFLICT (namespace, thread) DO UPDATE SET latest_step = EXCLUDED.latest_step,
        interrupted = EXCLUDED.interrupted, done = EXCLUDED.done, ts = EXCLUDED.ts,
        wake_at = EXCLUDED.wake_at, status = EXCLUDED.status, wake_us = EXCLUDED.wake_us"""
#: The status of the step a put writes, from its parameters.
_PUT_STATUS = _status("$6::boolean", "$5::boolean", "$8::text")
#: One round trip: the guarded write and the summary upsert in one statement.
#: The summary only moves forwards (writing an older step leaves it on the
#: newest), and a guarded write that matched nothing moves no summary either.
_PUT = (
    "WITH written AS ({write} RETURNING revision), summary AS ("
    + _SUMMARY.format(rows=f"SELECT $1, $2, $3, $5, $6, $7, $8, {_PUT_STATUS}, $10 FROM written")
    + " WHERE t.latest_step <= EXCLUDED.latest_step) SELECT revision FROM written"
)
_FROM_LATEST = (
    f"SELECT $1, $2, step, interrupted, done, ts, wake_at, {_STATUS}, wake_us FROM latest"
)
_SQL = {
    "create": _CREATE,
    "use_lz4": "ALTER TABLE {cp} ALTER COLUMN payload SET COMPRESSION lz4",
    "read_version": "SELECT version FROM {meta} WHERE component = 'checkpoints'",
    "record_version": "INSERT INTO {meta} (component, version) VALUES ('checkpoints', $1)"
    " ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
    # A no-op update returns the row that won a race, which DO NOTHING would not.
    "cursor_secret": "INSERT INTO {meta} AS m VALUES ('cursor_secret', 1, $1)"
    " ON CONFLICT (component) DO UPDATE SET value = m.value RETURNING value",
    "put_upsert": _PUT.replace(
        "{write}", f"{_INSERT} DO UPDATE SET revision = c.revision + 1, {_CHANGED}"
    ),
    "put_create": _PUT.replace("{write}", f"{_INSERT} DO NOTHING"),
    "put_expected": _PUT.replace(
        "{write}",
        f"UPDATE {{cp}} SET revision = revision + 1, {_CHANGED}"
        f" WHERE {_KEY} AND step = $3 AND revision = $11",
    ),
    "revision": f"SELECT revision FROM {{cp}} WHERE {_KEY} AND step = $3",
    "get_latest": f"{_ROW} ORDER BY step DESC LIMIT 1",
    "get_step": f"{_ROW} AND step = $3",
    "history": f"{_ROW} AND step > $3 ORDER BY step LIMIT $4",
    "list_after": f'{_INFO} WHERE namespace = $1 AND thread > $2 ORDER BY thread COLLATE "C"'
    " LIMIT $3",
    "list_status_after": f"{_INFO} WHERE namespace = $1 AND status = $4 AND thread > $2"
    ' ORDER BY thread COLLATE "C" LIMIT $3',
    "list_due": f"{_INFO} WHERE namespace = $1 AND status = 'waiting' AND wake_us <= $2"
    ' AND (wake_us, thread) > ($3, $4) ORDER BY wake_us, thread COLLATE "C" LIMIT $5',
    "delete_rows": f"""WITH gone AS (
        DELETE FROM {{cp}} WHERE {_KEY} AND ($3::bigint IS NULL OR step < $3)
            AND ($4::bigint IS NULL OR ts_us < $4)
        RETURNING 1
    ) SELECT count(*) FROM gone""",
    "lock_summary": f"SELECT FROM {{threads}} WHERE {_KEY} FOR UPDATE",
    "rebuild_summary": f"""WITH latest AS (
        SELECT step, interrupted, done, ts, wake_at, wake_us FROM {{cp}}
        WHERE {_KEY} ORDER BY step DESC LIMIT 1
    ), moved AS ({_SUMMARY.format(rows=_FROM_LATEST)})
    DELETE FROM {{threads}} WHERE {_KEY} AND NOT EXISTS (SELECT FROM latest)""",
    **{f"to_v2.{key}": text for key, text in _TO_V2.items()},
}
LZ4_AVAILABLE = (
    "SELECT coalesce(bool_or('lz4' = ANY(enumvals)), false) FROM pg_settings"
    " WHERE name = 'default_toast_compression'"
)


def _identifier(value: object, what: str) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise InvalidArgument(f"{what} must match {_IDENTIFIER.pattern}, got {value!r}")
    return value


def statements(table: str, schema: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """The quoted names of ``table``'s three tables (keys ``cp``, ``threads``,
    ``meta``) and every statement on them, by name; ``schema`` None means the
    search path. Raises :class:`InvalidArgument` for a name we would not quote."""
    prefix = "" if schema is None else f'"{_identifier(schema, "schema")}".'
    table = _identifier(table, "table")
    names = {key: f'{prefix}"{table}{suffix}"' for key, suffix in _SUFFIXES.items()}
    sql = {key: template.format(**names) for key, template in _SQL.items()}
    if schema is not None:
        sql["create"] = f'CREATE SCHEMA IF NOT EXISTS "{schema}";' + sql["create"]
    return names, sql
