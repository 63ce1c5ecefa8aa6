"""Damaged SQLite record, journal, event and summary rows raise and are never written over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable import event_payload_digest
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.testing import make_tool_entry
from agentflow.durable.testing.claims import claimed
from agentflow.errors import CheckpointCorrupted
from tests.backends.sqlite import BODY, HEAD, execute, overwrite


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


@pytest.fixture
async def store(path: Path) -> AsyncIterator[SqliteCheckpointer]:
    async with SqliteCheckpointer(path) as opened:
        yield opened


def _revision(path: Path) -> int:
    rows = execute(path, "SELECT revision FROM agentflow_runs WHERE part = 0")
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
    path: Path, store: SqliteCheckpointer, change: str, malformed: bool
) -> None:
    await claimed(store)
    await asyncio.to_thread(overwrite, path, change, None, "run-1", HEAD)
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    if malformed:  # a listing reads heads only, so it catches what a head alone shows
        with pytest.raises(DurableCorrupted):
            await store.list_runs()


@pytest.mark.parametrize(
    "change",
    [
        "entry = CAST('[1,\"0000000000000000\",{}]' AS BLOB)",  # fails its checksum
        "idx = 5",  # a gap in the journal
        "kind = 'other'",
    ],
)
async def test_a_damaged_journal_entry_raises_and_a_write_leaves_it(
    path: Path, store: SqliteCheckpointer, change: str
) -> None:
    record = await claimed(store)
    entry = make_tool_entry("run-1", 1, 1).start()
    record = await store.record_operation(record, entry, claim_token="owner-a")
    await asyncio.to_thread(execute, path, f"UPDATE agentflow_journal SET {change}")
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    other = make_tool_entry("run-1", 1, 2).start()  # a write of another entry
    record = await store.record_operation(record, other, claim_token="owner-a")
    with pytest.raises(DurableCorrupted):  # does not hide the damage
        await store.load("run-1")
    assert _revision(path) == record.revision


async def test_a_missing_body_row_raises_and_nothing_is_written(
    path: Path, store: SqliteCheckpointer
) -> None:
    record = await claimed(store)
    await asyncio.to_thread(execute, path, "DELETE FROM agentflow_runs WHERE part = ?", BODY)
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    with pytest.raises(DurableCorrupted):
        await store.progress(record, claim_token="owner-a")
    assert _revision(path) == record.revision


async def test_a_body_that_is_not_bytes_raises(path: Path, store: SqliteCheckpointer) -> None:
    await claimed(store)
    await asyncio.to_thread(overwrite, path, "body = NULL", None, "run-1", BODY)
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")


async def test_a_text_column_that_is_not_utf8_raises_without_quoting_it(
    path: Path, store: SqliteCheckpointer
) -> None:
    await claimed(store)
    change = "claim_token = CAST(x'ff736563726574' AS TEXT)"  # "\xffsecret"
    await asyncio.to_thread(overwrite, path, change, None, "run-1", HEAD)
    with pytest.raises(DurableCorrupted) as caught:
        await store.load("run-1")
    assert "secret" not in str(caught.value) and caught.value.__cause__ is None


@pytest.mark.parametrize(
    "change",
    ["event = CAST('{\"n\": 2}' AS BLOB)", f"payload_digest = '{'0' * 64}'"],
)
async def test_a_damaged_event_raises_on_replay(path: Path, change: str) -> None:
    event = {"type": "step", "run_id": "run-a", "n": 1}
    async with SqliteCheckpointer(path) as events:
        await events.append_once("evt-1", event_payload_digest(event), event)
        await asyncio.to_thread(execute, path, f"UPDATE agentflow_events SET {change}")
        with pytest.raises(DurableCorrupted):
            await events.replay("run-a")


async def test_a_damaged_run_status_in_a_summary_raises(
    path: Path, store: SqliteCheckpointer
) -> None:
    await store.put(make_checkpoint("t", 0))
    await asyncio.to_thread(execute, path, "UPDATE agentflow_threads SET run_status = 'paused'")
    with pytest.raises(CheckpointCorrupted):
        await store.list_threads()


async def test_a_record_without_its_head_row_can_still_be_deleted(
    path: Path, store: SqliteCheckpointer
) -> None:
    await claimed(store)
    await asyncio.to_thread(execute, path, "DELETE FROM agentflow_runs WHERE part = ?", HEAD)
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    assert await store.delete("run-1") is True
    assert await store.load("run-1") is None
