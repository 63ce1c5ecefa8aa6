"""Today's PostgreSQL layout (checkpoint tables at version 2, durable tables at their
own version 1) becomes one store at version 3, with every part readable and
every run resumable.

The layout is ``tests/data/migration/postgres/dump.sql``, made by the code of
the last release before one store per database (``make_dump.py`` beside it says
how): in the default namespace (plain) and in ``sealed`` (sealed with
``keys.json``), a run paused for a human (``paused``), a run waiting for
reconciliation after a lost reply (``ambiguous``) and two accepted events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agentflow.checkpoint.postgres import SCHEMA_VERSION, PostgresCheckpointer
from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable import OperationState, ReconciliationDecision
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import DurableCorrupted
from agentflow.errors import CheckpointCorrupted, IncompatibleSchema
from tests.backends.postgres import DSN, Connection, admin_session, unique_table
from tests.runtime.graphs import approval_graph, ledger_lines, lost_reply_graph

admin = pytest.fixture(admin_session)

DATA = Path(__file__).parents[1] / "data" / "migration" / "postgres"
TABLE = "legacy"
#: The namespaces of the dump and the key ring each was written with.
NAMESPACES: dict[str | None, KeyRing | None] = {
    None: None,
    "sealed": KeyRing.from_source(lambda: json.loads((DATA / "keys.json").read_text())),
}


async def load_dump(schema: str) -> None:
    """The dump, in ``schema``, on a connection of its own (it sets the search path)."""
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute((DATA / "dump.sql").read_text().replace("af_dump_v2", schema))
    finally:
        await conn.close()


@pytest.fixture
async def legacy(admin: Connection) -> AsyncIterator[str]:
    """A schema holding today's layout, dropped after."""
    schema = unique_table()
    await load_dump(schema)
    yield schema
    await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def opened(schema: str, namespace: str | None, **options: Any) -> PostgresCheckpointer:
    return PostgresCheckpointer(
        DSN,
        table=TABLE,
        schema=schema,
        namespace=namespace,
        sealing=NAMESPACES[namespace],
        **options,
    )


async def _meta(admin: Connection, schema: str) -> dict[str, int]:
    rows = await admin.fetch(f'SELECT component, version FROM "{schema}"."{TABLE}_meta"')
    return {row[0]: row[1] for row in rows}


async def _shape(admin: Connection, schema: str) -> list[tuple[Any, ...]]:
    """Columns, indexes and options of every table of the store in ``schema``."""
    columns = await admin.fetch(
        """SELECT table_name, ordinal_position, column_name, data_type, is_nullable,
            column_default, collation_name, is_identity
        FROM information_schema.columns WHERE table_schema = $1 ORDER BY 1, 2""",
        schema,
    )
    indexes = await admin.fetch(
        "SELECT tablename, replace(indexdef, $1, '<s>') FROM pg_indexes WHERE schemaname = $1"
        " ORDER BY 1, 2",
        schema,
    )
    options = await admin.fetch(
        """SELECT c.relname, c.reloptions, a.attname, a.attcompression FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attcompression <> ''
        WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1, 3""",
        schema,
    )
    return [tuple(row) for row in (*columns, *indexes, *options)]


async def test_every_part_reads_back_after_the_migration(admin: Connection, legacy: str) -> None:
    stores = [opened(legacy, namespace) for namespace in NAMESPACES for _ in range(3)]
    try:
        await asyncio.gather(*(store.setup() for store in stores))  # racing migrations
        for store in stores[::3]:
            steps = [cp async for cp in store.history("paused")]
            assert [cp.step for cp in steps] == [0, 1, 2]
            assert steps[-1].interrupted and steps[-1].state["log"] == ["prepare"]
            waiting = await store.get("ambiguous")
            assert waiting is not None and waiting.step == 0
            paused, ambiguous = await store.load("paused"), await store.load("ambiguous")
            assert paused is not None and paused.status is CheckpointStatus.RUNNING
            assert ambiguous is not None
            assert ambiguous.status is CheckpointStatus.RECONCILIATION_REQUIRED
            [entry] = ambiguous.tool_journal
            assert (entry.tool_name, entry.state) == ("charge", OperationState.AMBIGUOUS)
            page = await store.replay("paused", include_children=True)
            assert [event.event_id for event in page.events] == ["evt-paused", "evt-child"]
            by_status = {
                status: [
                    info.thread for info in (await store.list_threads_page(status=status)).threads
                ]
                for status in ("running", "interrupted", "reconciliation_required")
            }
            # Today's summary said "running" for the ambiguous run; its record says more.
            assert by_status == {
                "running": [],
                "interrupted": ["paused"],
                "reconciliation_required": ["ambiguous"],
            }
    finally:
        await asyncio.gather(*(store.close() for store in stores))
    assert await _meta(admin, legacy) == {"checkpoints": SCHEMA_VERSION, "cursor_secret": 1}
    fresh = unique_table()
    try:
        async with PostgresCheckpointer(DSN, table=TABLE, schema=fresh) as new:
            await new.setup()
        assert await _shape(admin, legacy) == await _shape(admin, fresh)
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{fresh}" CASCADE')


async def test_sealed_parts_stay_sealed_and_need_the_ring(legacy: str) -> None:
    async with opened(legacy, "sealed") as sealed:
        await sealed.setup()
    async with PostgresCheckpointer(DSN, table=TABLE, schema=legacy, namespace="sealed") as plain:
        with pytest.raises(CheckpointCorrupted):
            await plain.get("paused")
        with pytest.raises(DurableCorrupted):
            await plain.load("ambiguous")
        with pytest.raises(DurableCorrupted):
            await plain.replay("paused")


async def test_the_runs_resume_after_the_migration(
    legacy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the ledger the ambiguous charge names, relative
    for namespace in NAMESPACES:
        async with opened(legacy, namespace) as store:
            answered = await approval_graph().compile(store).resume("paused", "yes")
            assert answered.status == "done"
            assert answered.state["log"] == ["prepare", "answer yes", "finish"]
            compiled = lost_reply_graph().compile(store)
            record = await store.load("ambiguous")
            assert record is not None
            receipt = {"charged": 700}
            decision = ReconciliationDecision.replay_result(receipt)
            await compiled.reconcile(
                "ambiguous", record.tool_journal[0].operation_id, decision, attempt=1
            )
            settled = await compiled.resume("ambiguous")
            assert settled.status == "done" and settled.state["receipt"] == receipt
            assert [i.status for i in (await store.list_threads_page()).threads] == ["done"] * 2
    assert ledger_lines(tmp_path / "ledger-default.txt") == []  # charged once, before
    assert ledger_lines(tmp_path / "ledger-sealed.txt") == []


@pytest.mark.parametrize(("version", "error"), [(2, IncompatibleSchema), (0, CheckpointCorrupted)])
async def test_durable_tables_of_another_version_stop_the_migration(
    admin: Connection, legacy: str, version: int, error: type[Exception]
) -> None:
    meta = f'"{legacy}"."{TABLE}_meta"'
    await admin.execute(f"UPDATE {meta} SET version = $1 WHERE component = 'durable'", version)
    async with opened(legacy, None) as store:
        with pytest.raises(error):
            await store.setup()
    assert (await _meta(admin, legacy))["checkpoints"] == 2  # nothing changed
    columns = await admin.fetchval(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1"
        " AND column_name = 'run_status'",
        legacy,
    )
    assert columns == 0


async def test_a_reader_opened_with_create_false_migrates_too(
    admin: Connection, legacy: str
) -> None:
    async with opened(legacy, None, create=False) as reader:
        assert [i.thread for i in await reader.list_threads()] == ["ambiguous", "paused"]
    assert (await _meta(admin, legacy))["checkpoints"] == SCHEMA_VERSION
