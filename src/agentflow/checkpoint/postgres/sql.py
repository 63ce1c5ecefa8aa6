"""The names of a PostgreSQL store's tables, checked and quoted, and the text of
every checkpoint statement; the run and event statements are in
:mod:`~agentflow.checkpoint.postgres.runs_sql`, the tables in
:mod:`~agentflow.checkpoint.postgres.schema`.

Names are validated rather than escaped, so a table in psql is spelled the same
way it was passed; values are never spliced into the text.
"""

from __future__ import annotations

import re
from typing import Final

from agentflow.checkpoint.store_base import RUN_STATUSES
from agentflow.errors import InvalidArgument

__all__ = ["LZ4_AVAILABLE", "SETUP_LOCK_KEY", "checkpoint_statements", "table_names"]

#: The tables of one store, by the suffix each adds to ``table``.
_SUFFIXES: Final = {"cp": "", "threads": "_threads", "meta": "_meta"} | {
    part: f"_durable_{part}" for part in ("runs", "bodies", "journal", "events")
}
_MAX_IDENTIFIER: Final = 63
#: Lowercase only, so a quoted name means the same as the unquoted one a human
#: types in psql. ``table`` is short enough that its longest table name fits
#: PostgreSQL's 63 bytes (a longer one would be truncated, and could collide).
_IDENTIFIER: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MAX_TABLE: Final = _MAX_IDENTIFIER - max(len(suffix) for suffix in _SUFFIXES.values())

#: One advisory-lock key ("afsetup1") for every agentflow schema change in a
#: database: setup is rare, and one key also serialises CREATE SCHEMA races.
SETUP_LOCK_KEY: Final = 0x6166_7365_7475_7031
LZ4_AVAILABLE: Final = (
    "SELECT coalesce(bool_or('lz4' = ANY(enumvals)), false) FROM pg_settings"
    " WHERE name = 'default_toast_compression'"
)


def _identifier(value: object, what: str, longest: int = _MAX_IDENTIFIER) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value) or len(value) > longest:
        raise InvalidArgument(
            f"{what} must match {_IDENTIFIER.pattern} in at most {longest} characters,"
            f" got {value!r}"
        )
    return value


def table_names(table: str, schema: str | None) -> dict[str, str]:
    """The quoted names of ``table``'s tables (keys of ``_SUFFIXES``) and ``schema``
    (quoted, "" for the search path). Raises :class:`InvalidArgument` for a name
    we would not quote."""
    table = _identifier(table, "table", _MAX_TABLE)
    prefix = "" if schema is None else f'"{_identifier(schema, "schema")}".'
    names = {key: f'{prefix}"{table}{suffix}"' for key, suffix in _SUFFIXES.items()}
    names["schema"] = prefix[:-1]
    return names


def run_status_of(status: str) -> str:
    """SQL for the thread status a record's ``status`` column imposes (NULL: none),
    as :func:`~agentflow.checkpoint.store_base.run_thread_status` decides it."""
    cases = " ".join(f"WHEN '{run.value}' THEN '{thread}'" for run, thread in RUN_STATUSES.items())
    return f"CASE {status} {cases} END"


def _status(done: str, interrupted: str, wake_at: str) -> str:
    """A thread's status from its latest step's columns, as ThreadInfo.status defines it."""
    return (
        f"CASE WHEN {done} THEN 'done' WHEN NOT {interrupted} THEN 'running'"
        f" WHEN {wake_at} IS NULL THEN 'interrupted' ELSE 'waiting' END"
    )


# {cp}, {threads}, {runs} become validated identifiers, always double-quoted;
# every value is a $n parameter. A put binds $1 namespace, $2 thread, $3 step,
# $4 ts_us, $5 interrupted, $6 done, $7 ts, $8 wake_at, $9 payload, $10 wake_us,
# $11 expected revision.
STATUS: Final = _status("done", "interrupted", "wake_at")
_KEY = "namespace = $1 AND thread = $2"
_ROW = "SELECT step, revision, payload FROM {cp} WHERE " + _KEY
#: A summary's columns as ThreadInfo takes them (run_status: the record's say).
_INFO = "SELECT thread, latest_step, interrupted, done, ts, wake_at, run_status FROM {threads}"
_INSERT = """INSERT INTO {cp} AS c (namespace, thread, step, revision, ts_us, interrupted,
        done, ts, wake_at, payload, wake_us)
    VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (namespace, thread, step)"""
_CHANGED = (
    "ts_us = $4, interrupted = $5, done = $6, ts = $7, wake_at = $8, payload = $9, wake_us = $10"
)
#: The run status a thread's record imposes, for a summary row being created:
#: an existing summary keeps the one record writes set.
RECORDED_RUN_STATUS: Final = (
    f"(SELECT {run_status_of('r.status')} FROM {{runs}} r WHERE r.namespace = $1 AND r.key = $2)"
)
_SUMMARY_COLUMNS = "(namespace, thread, latest_step, interrupted, done, ts, wake_at, status,"
_SUMMARY_SET = """latest_step = EXCLUDED.latest_step,
        interrupted = EXCLUDED.interrupted, done = EXCLUDED.done, ts = EXCLUDED.ts,
        wake_at = EXCLUDED.wake_at, status = EXCLUDED.status, wake_us = EXCLUDED.wake_us"""


def summary_upsert(rows: str, *, run_status: bool) -> str:
    """The summary upsert of ``rows`` (a SELECT of its nine columns then run_status);
    ``run_status`` True also overwrites the stored run status."""
    kept = ", run_status = EXCLUDED.run_status" if run_status else ""
    return (
        f"INSERT INTO {{threads}} AS t {_SUMMARY_COLUMNS} wake_us, run_status) {rows}"
        f" ON CONFLICT (namespace, thread) DO UPDATE SET {_SUMMARY_SET}{kept}"
    )


#: The status of the step a put writes, from its parameters.
PUT_STATUS: Final = _status("$6::boolean", "$5::boolean", "$8::text")
#: One round trip: the guarded write and the summary upsert in one statement.
#: The summary only moves forwards (writing an older step leaves it on the
#: newest), and a guarded write that matched nothing moves no summary either.
_PUT = (
    "WITH written AS ({write} RETURNING revision), summary AS ("
    + summary_upsert(
        f"SELECT $1, $2, $3, $5, $6, $7, $8, {PUT_STATUS}, $10, {RECORDED_RUN_STATUS} FROM written",
        run_status=False,
    )
    + " WHERE t.latest_step <= EXCLUDED.latest_step) SELECT revision FROM written"
)
_FROM_LATEST = (
    f"SELECT $1, $2, step, interrupted, done, ts, wake_at, {STATUS}, wake_us,"
    f" {RECORDED_RUN_STATUS} FROM latest"
)
_SQL: Final = {
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
    # The rows with $3 < step <= $4, oldest first or newest first.
    "history": f"{_ROW} AND step > $3 AND step <= $4 ORDER BY step LIMIT $5",
    "history_newest_first": f"{_ROW} AND step > $3 AND step <= $4 ORDER BY step DESC LIMIT $5",
    "steps": f"{_ROW} AND step = ANY($3::bigint[])",
    "list_after": f'{_INFO} WHERE namespace = $1 AND thread > $2 ORDER BY thread COLLATE "C"'
    " LIMIT $3",
    # The effective status (the record's, else the latest step's) is indexed.
    "list_status_after": f"{_INFO} WHERE namespace = $1 AND coalesce(run_status, status) = $4"
    ' AND thread > $2 ORDER BY thread COLLATE "C" LIMIT $3',
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
    ), moved AS ({summary_upsert(_FROM_LATEST, run_status=True)})
    DELETE FROM {{threads}} WHERE {_KEY} AND NOT EXISTS (SELECT FROM latest)""",
}


def checkpoint_statements(names: dict[str, str]) -> dict[str, str]:
    """Every checkpoint statement on the tables ``names`` (of :func:`table_names`), by name."""
    return {key: template.format(**names) for key, template in _SQL.items()}
