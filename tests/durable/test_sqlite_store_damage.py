"""Damaged SQLite durable rows raise DurableCorrupted and are never written over."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from agentflow.durable import event_payload_digest
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.stores.sqlite import SqliteDurableStore
from agentflow.durable.stores.sqlite_events import SqliteRunEventStore
from agentflow.durable.testing import make_tool_entry
from agentflow.durable.testing.claims import claimed
from tests.durable.backends.sqlite import overwrite

HEAD, BODY = 0, 1


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "durable.db"


@pytest.fixture
async def store(path: Path) -> AsyncIterator[SqliteDurableStore]:
    async with SqliteDurableStore(path) as opened:
        yield opened


def _raw(path: Path, sql: str, *args: Any) -> list[Any]:
    with closing(sqlite3.connect(path)) as conn, conn:
        return conn.execute(sql, args).fetchall()


def _revision(path: Path) -> int:
    rows = _raw(path, "SELECT revision FROM agentflow_durable_runs WHERE part = 0")
    revision: int = rows[0][0]
    return revision


@pytest.mark.parametrize(
    ("change", "malformed"),
    [
        ("status = 'paused'", True),
        ("revision = -1", True),
        ("terminal = 2", True),
        ("identity = NULL", True),
        ("terminal = 1", False),  # well-formed, but the body holds no terminal result
        ("ambiguous = 1", False),  # well-formed, but no journal entry is ambiguous
    ],
)
async def test_a_damaged_head_raises_on_every_read(
    path: Path, store: SqliteDurableStore, change: str, malformed: bool
) -> None:
    await claimed(store)
    await asyncio.to_thread(overwrite, path, change, None, "run-1", HEAD)
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    if malformed:  # a listing reads heads only, so it catches what a head alone shows
        with pytest.raises(DurableCorrupted):
            await store.list_runs()


async def test_a_damaged_journal_raises_and_is_not_written_over(
    path: Path, store: SqliteDurableStore
) -> None:
    record = await claimed(store)
    await asyncio.to_thread(overwrite, path, "tool_journal = '[{'", None, "run-1", HEAD)
    with pytest.raises(DurableCorrupted) as caught:
        await store.load("run-1")
    assert caught.value.code == "checkpoint_json_invalid"
    with pytest.raises(DurableCorrupted):
        await store.record_operation(record, make_tool_entry("run-1", 1), claim_token="owner-a")
    assert _revision(path) == record.revision
    assert _raw(path, "SELECT tool_journal FROM agentflow_durable_runs WHERE part = 0") == [("[{",)]


async def test_a_missing_body_row_raises_and_nothing_is_written(
    path: Path, store: SqliteDurableStore
) -> None:
    record = await claimed(store)
    await asyncio.to_thread(_raw, path, "DELETE FROM agentflow_durable_runs WHERE part = ?", BODY)
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    with pytest.raises(DurableCorrupted):
        await store.progress(record, claim_token="owner-a")
    assert _revision(path) == record.revision


async def test_a_body_that_is_not_bytes_raises(path: Path, store: SqliteDurableStore) -> None:
    await claimed(store)
    await asyncio.to_thread(overwrite, path, "body = NULL", None, "run-1", BODY)
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")


@pytest.mark.parametrize(
    "change",
    ["event = CAST('{\"n\": 2}' AS BLOB)", f"payload_digest = '{'0' * 64}'"],
)
async def test_a_damaged_event_raises_on_replay(path: Path, change: str) -> None:
    event = {"type": "step", "run_id": "run-a", "n": 1}
    async with SqliteRunEventStore(path) as events:
        await events.append_once("evt-1", event_payload_digest(event), event)
        await asyncio.to_thread(_raw, path, f"UPDATE agentflow_durable_events SET {change}")
        with pytest.raises(DurableCorrupted):
            await events.replay("run-a")
