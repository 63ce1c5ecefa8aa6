"""The tables of a PostgreSQL store, created together under one version, and the
migrations that bring an older store up to date.

Version 4 is one schema for a thread's three parts: checkpoints (``<table>``,
the ``<table>_threads`` summary, ``<table>_meta``) and the durable tables
(``<table>_durable_{runs,bodies,journal,events}``), with the summary keeping
the status a record imposes (``run_status``) and each record its run
definition's digest and an index of its claim's holder (for worker fleets;
version 3 had neither, and its records keep no digest). Versions 1 and 2 had only the
checkpoint tables; a version 2 store may also hold durable tables, which had a
version of their own (meta row ``durable``, 1): the migration keeps them,
fills ``run_status`` from them, and drops that row.

Setup is one transaction under a transaction-scoped advisory lock, so any
number of processes may run it at once, the lock cannot outlive it on a pooled
connection, and a failed setup or migration leaves nothing behind (every DDL
statement here is transactional). A current version executes no DDL.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, NoReturn

from agentflow.checkpoint.postgres.sql import LZ4_AVAILABLE, SETUP_LOCK_KEY, STATUS, run_status_of
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointCorrupted, IncompatibleSchema, InvalidArgument, StoreNotFound

__all__ = ["SCHEMA_VERSION", "prepare"]

#: Version of the tables this module creates; a store recording a newer one is refused.
SCHEMA_VERSION: Final = 4
#: The version the durable tables had while they were versioned apart (meta row ``durable``).
_DURABLE_VERSION: Final = 1

# Columns added after the first version come last, in the order the migrations
# add them, so a migrated table and a new one have the same shape. Indexes are
# unnamed: PostgreSQL picks names that fit in 63 bytes and collide with nothing.
_STATUS_INDEX: Final = (
    "CREATE INDEX ON {threads} (namespace, (coalesce(run_status, status)), thread);"
)
_DUE_INDEX: Final = (
    "CREATE INDEX ON {threads} (namespace, wake_us, thread) WHERE status = 'waiting';"
)
_CHECKPOINT_TABLES: Final = f"""
CREATE TABLE IF NOT EXISTS {{meta}} (
    component TEXT PRIMARY KEY, version INTEGER NOT NULL, value BYTEA
);
CREATE TABLE IF NOT EXISTS {{cp}} (
    namespace TEXT COLLATE "C" NOT NULL, thread TEXT COLLATE "C" NOT NULL,
    step BIGINT NOT NULL, revision BIGINT NOT NULL, ts_us BIGINT NOT NULL, ts TEXT NOT NULL,
    interrupted BOOLEAN NOT NULL, done BOOLEAN NOT NULL, wake_at TEXT, payload BYTEA NOT NULL,
    wake_us BIGINT,
    PRIMARY KEY (namespace, thread, step)
);
CREATE TABLE IF NOT EXISTS {{threads}} (
    namespace TEXT COLLATE "C" NOT NULL, thread TEXT COLLATE "C" NOT NULL,
    latest_step BIGINT NOT NULL, interrupted BOOLEAN NOT NULL, done BOOLEAN NOT NULL,
    ts TEXT NOT NULL, wake_at TEXT, status TEXT COLLATE "C" NOT NULL, wake_us BIGINT,
    run_status TEXT COLLATE "C",
    PRIMARY KEY (namespace, thread)
) WITH (fillfactor = 70);
{_STATUS_INDEX}
{_DUE_INDEX}
"""
_DURABLE_TABLES: Final = """
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
#: Version 3 to 4 (and the last part of a new store): a record's run definition
#: digest beside its head, so a worker fleet claims its own graphs' due runs and
#: counts their live leases (``claim_due``), and the claimed records by claim
#: token (in byte order), so a restarted worker finds what its identity held
#: (``list_held``) and a limit counts O(claimed) rows. A record written before
#: keeps NULL: any definition.
_TO_V4: Final = """ALTER TABLE {runs} ADD COLUMN definition TEXT COLLATE "C";
CREATE INDEX ON {runs} (namespace, (claim_token COLLATE "C")) WHERE claim_token IS NOT NULL;
"""
_LZ4: Final = "ALTER TABLE {} ALTER COLUMN {} SET COMPRESSION lz4;"

#: Version 1 to 2: the summary keeps its status and wake instant, indexed, for
#: the status filter and list_due; the meta table holds the cursor secret. The
#: wake instants of existing rows are parsed in Python (``wake_timers``, then
#: ``set_wake``), since only Python's parser reads every ISO form we accepted,
#: and copied to the summaries (``summary_wake``).
_TO_V2: Final = {
    "add_columns": f"""
        ALTER TABLE {{meta}} ADD COLUMN value BYTEA;
        ALTER TABLE {{cp}} ADD COLUMN wake_us BIGINT;
        ALTER TABLE {{threads}} ADD COLUMN status TEXT COLLATE "C" NOT NULL DEFAULT 'running',
            ADD COLUMN wake_us BIGINT;
        UPDATE {{threads}} SET status = {STATUS} WHERE done OR interrupted;
        ALTER TABLE {{threads}} ALTER COLUMN status DROP DEFAULT;
        CREATE INDEX ON {{threads}} (namespace, status, thread);
        {_DUE_INDEX}""",
    "wake_timers": "SELECT namespace, thread, step, wake_at FROM {cp} WHERE wake_at IS NOT NULL",
    "set_wake": "UPDATE {cp} SET wake_us = $4 WHERE namespace = $1 AND thread = $2 AND step = $3",
    "summary_wake": """UPDATE {threads} AS t SET wake_us = c.wake_us FROM {cp} AS c
        WHERE t.wake_at IS NOT NULL AND c.namespace = t.namespace AND c.thread = t.thread
            AND c.step = t.latest_step""",
}
#: Version 2 to 3: the summary's run status, indexed with the step's status as
#: the effective one (the version 2 status index goes), filled from the records.
_TO_V3: Final = {
    "run_status": f"""ALTER TABLE {{threads}} ADD COLUMN run_status TEXT COLLATE "C";
        {_STATUS_INDEX}""",
    "old_status_index": """SELECT indexrelid::regclass::text FROM pg_index
        WHERE indrelid = '{threads}'::regclass
        AND pg_get_indexdef(indexrelid) LIKE '%USING btree (namespace, status, thread)'""",
    "fill_run_status": f"""UPDATE {{threads}} t SET run_status = {run_status_of("r.status")}
        FROM {{runs}} r WHERE r.namespace = t.namespace AND r.key = t.thread
        AND {run_status_of("r.status")} IS NOT NULL""",
    "drop_durable_version": "DELETE FROM {meta} WHERE component = 'durable'",
}


def _instant(wake_at: str) -> int | None:
    """A stored wake time in µs; None (never due) for text older releases let in."""
    try:
        return parse_instant(wake_at)
    except InvalidArgument:
        return None


async def _to_v2(conn: Any, names: dict[str, str]) -> None:
    sql = {key: text.format(**names) for key, text in _TO_V2.items()}
    await conn.execute(sql["add_columns"])
    timers = await conn.fetch(sql["wake_timers"])
    instants = [(ns, thread, step, _instant(wake_at)) for ns, thread, step, wake_at in timers]
    await conn.executemany(sql["set_wake"], instants)
    await conn.execute(sql["summary_wake"])


async def _to_v3(conn: Any, names: dict[str, str]) -> None:
    sql = {key: text.format(**names) for key, text in _TO_V3.items()}
    durable = await conn.fetchval(
        f"SELECT version FROM {names['meta']} WHERE component = 'durable'"
    )
    if durable is None:
        await _create(conn, names, _DURABLE_TABLES, bodies="body", events="event")
    elif durable != _DURABLE_VERSION:
        _refuse(durable, names, "durable ")
    old_index = await conn.fetchval(sql["old_status_index"])
    if old_index is not None:
        await conn.execute(f"DROP INDEX {old_index}")
    await conn.execute(sql["run_status"])
    await conn.execute(sql["fill_run_status"])
    await conn.execute(sql["drop_durable_version"])


async def _to_v4(conn: Any, names: dict[str, str]) -> None:
    await conn.execute(_TO_V4.format(**names))


#: The step from each older version to the next one.
_Migration = Callable[[Any, dict[str, str]], Awaitable[None]]
_MIGRATIONS: Final[dict[int, _Migration]] = {1: _to_v2, 2: _to_v3, 3: _to_v4}


async def _create(conn: Any, names: dict[str, str], tables: str, **lz4: str) -> None:
    """Run the DDL ``tables``, then compress the ``table=column`` payloads with lz4
    where the server has it."""
    await conn.execute(tables.format(**names))
    if await conn.fetchval(LZ4_AVAILABLE):
        await conn.execute("".join(_LZ4.format(names[t], c) for t, c in lz4.items()))


def _refuse(version: object, names: dict[str, str], what: str = "") -> NoReturn:
    newest = _DURABLE_VERSION if what else SCHEMA_VERSION
    if isinstance(version, int) and version > newest:
        raise IncompatibleSchema(
            f"{names['cp']} has agentflow {what}schema version {version}, which this agentflow"
            f" ({what}schema version {newest}) cannot read: upgrade agentflow"
        )
    raise CheckpointCorrupted(f"{names['cp']} holds an invalid {what}schema version {version!r}")


async def prepare(conn: Any, names: dict[str, str], *, create: bool = True) -> None:
    """Create every table of ``names`` on ``conn`` if absent (``create=False``:
    raise StoreNotFound instead), or migrate them to :data:`SCHEMA_VERSION`;
    raise IncompatibleSchema for a newer store."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", SETUP_LOCK_KEY)
        version = None
        if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", names["meta"]):
            version = await conn.fetchval(
                f"SELECT version FROM {names['meta']} WHERE component = 'checkpoints'"
            )
        if version == SCHEMA_VERSION:
            return
        if version is None:
            if not create:
                raise StoreNotFound(f"no store: table {names['cp']} does not exist")
            if names["schema"]:
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {names['schema']}")
            tables = _CHECKPOINT_TABLES + _DURABLE_TABLES + _TO_V4
            await _create(conn, names, tables, cp="payload", bodies="body", events="event")
        elif version in _MIGRATIONS:
            for older in range(version, SCHEMA_VERSION):
                await _MIGRATIONS[older](conn, names)
        else:
            _refuse(version, names)
        await conn.execute(
            f"INSERT INTO {names['meta']} (component, version) VALUES ('checkpoints', $1)"
            " ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
            SCHEMA_VERSION,
        )
