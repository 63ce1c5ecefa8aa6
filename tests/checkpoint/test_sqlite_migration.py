"""A file of the layout before one store per database (checkpoint schema 2 + durable schema 1)
opens as schema 3 with every part readable, sealed ones included, and its runs resume.

The file is tests/data/migration/sqlite/v2.sql, made by make_dump.py beside it from
the code of commit aeb9750: a run paused on a human interrupt and one waiting for
reconciliation after a lost payment reply, each in the default namespace and,
sealed with keys.json's ring, in namespace ``sealed``, and two events per namespace.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from agentflow.checkpoint.sealing import KeyRing
from agentflow.checkpoint.sqlite import SCHEMA_VERSION, SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable import OperationState, ReconciliationDecision, event_payload_digest
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.testing import make_record
from agentflow.errors import CheckpointCorrupted, IncompatibleSchema
from tests.backends.sqlite import execute
from tests.runtime.graphs import approval_graph, lost_reply_graph

DATA = Path(__file__).parent.parent / "data" / "migration" / "sqlite"
#: Every table of schema version 3.
TABLES = [
    "agentflow_checkpoints",
    "agentflow_events",
    "agentflow_journal",
    "agentflow_meta",
    "agentflow_runs",
    "agentflow_threads",
]


def _load_dump(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript((DATA / "v2.sql").read_text())


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    path = tmp_path / "v2.db"
    _load_dump(path)
    return path


@pytest.fixture
def ring() -> Iterator[KeyRing]:
    yield KeyRing.from_source((DATA / "keys.json").read_bytes)  # git keeps no mode 0600


def _tables(path: Path) -> list[str]:
    rows = execute(path, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [name for (name,) in rows if name != "sqlite_sequence"]


@pytest.mark.parametrize(("namespace", "suffix"), [(None, "-1"), ("sealed", "-s")])
async def test_every_part_reads_back_after_the_migration(
    v2: Path, ring: KeyRing, namespace: str | None, suffix: str
) -> None:
    sealing = ring if namespace else None
    async with SqliteCheckpointer(v2, namespace=namespace, sealing=sealing) as store:
        paused = await store.get(f"approve{suffix}")
        assert paused is not None and paused.interrupted and paused.step == 2
        assert [cp.step async for cp in store.history(f"approve{suffix}")] == [0, 1, 2]
        record = await store.load(f"approve{suffix}")
        assert record is not None and record.status is CheckpointStatus.RUNNING
        ambiguous = await store.load(f"pay{suffix}")
        assert ambiguous is not None
        assert ambiguous.status is CheckpointStatus.RECONCILIATION_REQUIRED
        [entry] = ambiguous.tool_journal
        assert entry.state is OperationState.AMBIGUOUS and entry.tool_name == "charge"
        for index, thread in enumerate((f"approve{suffix}", f"pay{suffix}")):
            page = await store.replay(thread)
            assert [(e.event_id, e.event["n"]) for e in page.events] == [
                (f"evt{suffix}-{index}", index)
            ]
        statuses = {i.thread: i.status for i in (await store.list_threads_page()).threads}
        assert statuses == {
            f"approve{suffix}": "interrupted",
            f"pay{suffix}": "reconciliation_required",
        }
        waiting = await store.list_threads_page(status="reconciliation_required")
        assert [i.thread for i in waiting.threads] == [f"pay{suffix}"]
        runs = await store.list_runs(status=CheckpointStatus.RECONCILIATION_REQUIRED)
        assert [run.key for run in runs.runs] == [f"pay{suffix}"]
        # Events appended after the migration come after the migrated ones.
        event = {"type": "note", "run_id": f"pay{suffix}", "n": 9}
        appended = await store.append_once("after", event_payload_digest(event), event)
        assert appended.inserted
        page = await store.replay(f"pay{suffix}")
        assert [e.event_id for e in page.events] == [f"evt{suffix}-1", "after"]
    assert _tables(v2) == TABLES
    meta = dict(execute(v2, "SELECT key, value FROM agentflow_meta WHERE key != 'cursor_secret'"))
    assert meta == {"schema_version": SCHEMA_VERSION}


async def test_sealed_parts_stay_sealed_and_bound_to_their_namespace(
    v2: Path, ring: KeyRing
) -> None:
    async with SqliteCheckpointer(v2, namespace="sealed") as plain:
        with pytest.raises(CheckpointCorrupted):
            await plain.get("approve-s")
        with pytest.raises(DurableCorrupted):
            await plain.load("pay-s")
        with pytest.raises(DurableCorrupted):
            await plain.replay("pay-s")
    entries = execute(v2, "SELECT entry FROM agentflow_journal WHERE namespace = 'sealed'")
    assert entries and all(entry.startswith(b'[2,"') for (entry,) in entries)


async def test_the_migrated_runs_resume(v2: Path, ring: KeyRing) -> None:
    for namespace, suffix in ((None, "-1"), ("sealed", "-s")):
        sealing = ring if namespace else None
        async with SqliteCheckpointer(v2, namespace=namespace, sealing=sealing) as store:
            approved = await approval_graph().compile(store).resume(f"approve{suffix}", "yes")
            assert approved.status == "done" and approved.state["answer"] == "yes"
            payments = lost_reply_graph().compile(store)
            record = await store.load(f"pay{suffix}")
            assert record is not None
            receipt = {"charged": 700}
            await payments.reconcile(
                f"pay{suffix}",
                record.tool_journal[0].operation_id,
                ReconciliationDecision.replay_result(receipt),
                attempt=1,
            )
            # The charge went out once, when the dump was made: the resume replays the
            # decided receipt (a second call would fail: the ledger's directory is gone).
            paid = await payments.resume(f"pay{suffix}")
            assert paid.status == "done" and paid.state["receipt"] == receipt
            statuses = {i.thread: i.status for i in (await store.list_threads_page()).threads}
            assert set(statuses.values()) == {"done"}


async def test_a_record_before_its_first_step_still_imposes_its_status(v2: Path) -> None:
    async with SqliteCheckpointer(v2) as store:
        terminal = {"status": "failed", "error": {"code": "aborted"}}
        failed_run = make_record("late", status=CheckpointStatus.FAILED, terminal_result=terminal)
        await store.create(failed_run)
        await store.put(make_checkpoint("late", 0, next=("n",)))
        failed = await store.list_threads_page(status="failed")
        assert [i.thread for i in failed.threads] == ["late"]


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("schema_version", SCHEMA_VERSION + 1, IncompatibleSchema),
        ("durable_schema_version", 2, IncompatibleSchema),
        ("durable_schema_version", "x", CheckpointCorrupted),
    ],
)
async def test_a_newer_or_damaged_version_is_refused_and_nothing_changes(
    v2: Path, key: str, value: object, error: type[Exception]
) -> None:
    execute(v2, "UPDATE agentflow_meta SET value = ? WHERE key = ?", value, key)
    before = execute(v2, "SELECT sql FROM sqlite_master ORDER BY name")
    async with SqliteCheckpointer(v2) as store:
        with pytest.raises(error) as caught:
            await store.get("approve-1")
        if error is CheckpointCorrupted:
            assert not isinstance(caught.value, IncompatibleSchema)
    assert execute(v2, "SELECT sql FROM sqlite_master ORDER BY name") == before


async def test_a_damaged_old_journal_fails_the_migration_whole(v2: Path) -> None:
    execute(v2, "UPDATE agentflow_durable_runs SET tool_journal = '[{' WHERE key = 'pay-1'")
    before = execute(v2, "SELECT sql FROM sqlite_master ORDER BY name")
    async with SqliteCheckpointer(v2) as store:
        with pytest.raises(DurableCorrupted, match="cannot migrate"):
            await store.load("pay-1")
    assert execute(v2, "SELECT sql FROM sqlite_master ORDER BY name") == before


async def test_processes_opening_an_old_file_at_once_migrate_it_once(v2: Path) -> None:
    stores = [SqliteCheckpointer(v2, namespace=f"n{i}", busy_timeout=30) for i in range(4)]
    stores.append(SqliteCheckpointer(v2, busy_timeout=30, synchronous="NORMAL"))
    try:
        loaded = [await s.load("pay-1") for s in stores]
        assert [r is not None for r in loaded] == [False] * 4 + [True]
    finally:
        for store in stores:
            await store.close()
    rows = execute(v2, "SELECT count(*) FROM agentflow_journal")
    assert rows == [(2,)]  # one ambiguous entry per namespace, moved once
