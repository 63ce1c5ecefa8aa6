"""Damaged PostgreSQL durable rows raise DurableCorrupted and are never written over."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.durable import event_payload_digest
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.testing import make_tool_entry
from agentflow.durable.testing.claims import claimed
from tests.backends.postgres import DSN, Connection, admin_session, scratch_table

admin = pytest.fixture(admin_session)


table = pytest.fixture(scratch_table)


@pytest.fixture
async def store(table: str) -> AsyncIterator[PostgresCheckpointer]:
    async with PostgresCheckpointer(DSN, table=table) as opened:
        yield opened


async def _revision(admin: Connection, table: str) -> int:
    revision: int = await admin.fetchval(f'SELECT revision FROM "{table}_durable_runs"')
    return revision


@pytest.mark.parametrize(
    ("change", "malformed"),
    [
        ("status = 'paused'", True),
        ("revision = -1", True),
        (f"cycle_index = {2**53}", True),
        ("claimed_cycle = -3", True),
        ("terminal = true", False),  # well-formed, but the body holds no terminal result
        ("ambiguous = true", False),  # well-formed, but no journal entry is ambiguous
        ("identity = 'other'", False),
    ],
)
async def test_a_damaged_head_raises_on_every_read(
    admin: Connection, table: str, store: PostgresCheckpointer, change: str, malformed: bool
) -> None:
    await claimed(store)
    await admin.execute(f'UPDATE "{table}_durable_runs" SET {change}')
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    if malformed:  # a listing reads heads only, so it catches what a head alone shows
        with pytest.raises(DurableCorrupted):
            await store.list_runs()


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE {journal} SET entry = '\\x7b'::bytea WHERE idx = 0",
        "DELETE FROM {journal} WHERE idx = 0",  # a gap before the second entry
        "UPDATE {journal} SET kind = 'other' WHERE idx = 1",
        "UPDATE {journal} SET idx = 7 WHERE idx = 1",
    ],
)
async def test_a_damaged_journal_raises(
    admin: Connection, table: str, store: PostgresCheckpointer, change: str
) -> None:
    record = await claimed(store)
    for position in (1, 2):
        entry = make_tool_entry("run-1", 1, position)
        record = await store.record_operation(record, entry, claim_token="owner-a")
    await admin.execute(change.format(journal=f'"{table}_durable_journal"'))
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")


async def test_a_missing_body_raises_and_nothing_is_written(
    admin: Connection, table: str, store: PostgresCheckpointer
) -> None:
    record = await claimed(store)
    await admin.execute(f'DELETE FROM "{table}_durable_bodies"')
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    with pytest.raises(DurableCorrupted):
        await store.progress(record, claim_token="owner-a")
    assert await _revision(admin, table) == record.revision


@pytest.mark.parametrize(
    "change", ["event = '\\x7b226e223a20327d'::bytea", f"payload_digest = '{'0' * 64}'"]
)
async def test_a_damaged_event_raises_on_replay(admin: Connection, table: str, change: str) -> None:
    event = {"type": "step", "run_id": "run-a", "n": 1}
    async with PostgresCheckpointer(DSN, table=table) as events:
        await events.append_once("evt-1", event_payload_digest(event), event)
        await admin.execute(f'UPDATE "{table}_durable_events" SET {change}')
        with pytest.raises(DurableCorrupted):
            await events.replay("run-a")
