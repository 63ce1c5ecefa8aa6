"""The PostgreSQL store as one thing: a step's commit is one statement (one commit:
test_postgres_commits.py), a thread's delete is one transaction refused on a live lease,
a thread's status comes from its record, the three parts share one pool, and
``database`` names where the data lives without credentials."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from agentflow.checkpoint.postgres import PostgresCheckpointer, from_url
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable import OPERATOR_ABORT_CODE, event_payload_digest
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import ClaimActive, LeaseLost, RevisionConflict
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LAPSED_MS, claimed, lapse, take
from agentflow.errors import CheckpointConflict, InvalidArgument, StoreClosed, StoreUnavailable
from tests.backends.postgres import (
    DSN,
    Connection,
    admin_connection,
    admin_session,
    blocked_backend,
    logging_pool,
    scratch_table,
    settle_logs,
)

admin = pytest.fixture(admin_session)
table = pytest.fixture(scratch_table)
EVENT = {"type": "step", "run_id": "t"}


@pytest.fixture
async def store(table: str) -> AsyncIterator[PostgresCheckpointer]:
    async with PostgresCheckpointer(DSN, table=table) as opened:
        yield opened


async def _claimed_step(store: PostgresCheckpointer, thread: str = "t") -> DurableCheckpoint:
    """A claimed record of ``thread`` with its step 0 stored and one call started."""
    record = await claimed(store, thread)
    await store.put(make_checkpoint(thread, 0, next=("n",)))
    started = make_tool_entry(thread, 1).start()
    return await store.record_operation(record, started, claim_token="owner-a")


async def _journal_rows(admin: Connection, table: str) -> list[tuple[object, ...]]:
    rows = await admin.fetch(f'SELECT key, idx, entry FROM "{table}_durable_journal" ORDER BY 2')
    return [tuple(row) for row in rows]


# -- commit_step -------------------------------------------------------------------


async def test_a_step_commit_is_one_statement_holding_the_receipt_and_the_step(
    table: str,
) -> None:
    log: list[tuple[str, tuple[object, ...]]] = []
    pool = await logging_pool(log)
    try:
        async with PostgresCheckpointer(pool=pool, table=table) as store:
            record = await _claimed_step(store)
            receipt = record.tool_journal[0].succeed({"charged": 12})
            second = make_tool_entry("t", 1, 2)
            await settle_logs()
            log.clear()
            stored = await store.commit_step(
                make_checkpoint("t", 1), record, [receipt, second], claim_token="owner-a"
            )
            await settle_logs()
            assert len(log) == 1 and "_durable_runs" in log[0][0] and '"' + table in log[0][0]
            assert stored.revision == record.revision + 1 and stored.tool_journal == [
                receipt,
                second,
            ]
            assert await store.load("t") == stored
            cp = await store.get("t")
            assert cp is not None and cp.step == 1
            infos = await store.list_threads()
            assert [(i.latest_step, i.run_status) for i in infos] == [(1, None)]
    finally:
        await pool.close()


async def test_a_refused_step_commit_writes_nothing(
    admin: Connection, table: str, store: PostgresCheckpointer
) -> None:
    record = await _claimed_step(store)
    receipt = record.tool_journal[0].succeed({"charged": 12})
    before = await _journal_rows(admin, table)
    with pytest.raises(CheckpointConflict) as conflict:  # the step exists
        await store.commit_step(make_checkpoint("t", 0), record, [receipt], claim_token="owner-a")
    assert conflict.value.actual == 1
    with pytest.raises(LeaseLost):  # another holder's token
        await store.commit_step(make_checkpoint("t", 1), record, [receipt], claim_token="owner-b")
    stale = replace(record, revision=record.revision - 1)
    with pytest.raises(RevisionConflict):
        await store.commit_step(make_checkpoint("t", 1), stale, [receipt], claim_token="owner-a")
    assert await store.load("t") == record and await _journal_rows(admin, table) == before
    assert [cp.step async for cp in store.history("t")] == [0]


async def test_a_put_racing_a_step_commit_rolls_the_commit_back(
    admin: Connection, table: str, store: PostgresCheckpointer
) -> None:
    record = await _claimed_step(store)
    receipt = record.tool_journal[0].succeed({"charged": 12})
    before = await _journal_rows(admin, table)
    racer = await admin_connection()
    try:
        transaction = racer.transaction()
        await transaction.start()
        # Step 1 inserted, not yet committed: the commit's snapshot cannot see it.
        await racer.execute(
            f'INSERT INTO "{table}" SELECT namespace, thread, 1, 7, ts_us, ts, interrupted,'
            f' done, wake_at, payload, wake_us FROM "{table}" WHERE step = 0'
        )
        commit = asyncio.create_task(
            store.commit_step(make_checkpoint("t", 1), record, [receipt], claim_token="owner-a")
        )
        await blocked_backend(admin, racer)
        await transaction.commit()
        with pytest.raises(CheckpointConflict) as conflict:
            await commit
    finally:
        await racer.close()
    assert conflict.value.actual == 7
    assert await store.load("t") == record and await _journal_rows(admin, table) == before


# -- delete_thread -----------------------------------------------------------------


async def test_a_live_lease_refuses_a_delete_and_force_deletes_every_part(
    admin: Connection, table: str, store: PostgresCheckpointer
) -> None:
    await _claimed_step(store)
    await store.append_once("e-1", event_payload_digest(EVENT), EVENT)
    for call in (store.delete_thread("t"), store.delete("t"), store.prune("t", before_step=9)):
        with pytest.raises(ClaimActive):
            await call
    assert await store.get("t") is not None and await store.load("t") is not None
    assert len((await store.replay("t")).events) == 1
    assert await store.delete("t", force=True)
    assert (await store.get("t"), await store.load("t")) == (None, None)
    assert (await store.replay("t")).events == [] and await store.list_threads() == []
    for part in ("", "_threads", "_durable_runs", "_durable_journal", "_durable_events"):
        assert await admin.fetchval(f'SELECT count(*) FROM "{table}{part}"') == 0, part
    await store.create(make_record("t"))  # the id can be run again
    assert not await store.delete("absent")


async def test_a_lapsed_lease_lets_a_delete_through(store: PostgresCheckpointer) -> None:
    await store.create(make_record("t"))
    await take(store, "owner-a", key="t", lease_ms=LAPSED_MS)
    await store.put(make_checkpoint("t", 0))
    await lapse()
    await store.delete_thread("t")
    assert (await store.get("t"), await store.load("t")) == (None, None)


async def test_a_delete_waits_for_a_racing_claim_and_judges_its_lease(
    admin: Connection, table: str, store: PostgresCheckpointer
) -> None:
    await store.create(make_record("t"))
    await store.put(make_checkpoint("t", 0))
    locker = await admin_connection()
    try:
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute(
            f"""UPDATE "{table}_durable_runs" SET claim_token = 'owner-z', claimed_cycle = 1,
                lease_expires_at_ms = 9007199254740991, revision = revision + 1"""
        )
        delete = asyncio.create_task(store.delete_thread("t"))
        await blocked_backend(admin, locker)
        await transaction.commit()  # the delete now sees a live lease
        with pytest.raises(ClaimActive):
            await delete
    finally:
        await locker.close()
    assert await store.get("t") is not None


# -- the thread status a record imposes ----------------------------------------------


async def test_the_record_sets_the_threads_status_in_listings_and_filters(
    store: PostgresCheckpointer,
) -> None:
    record = await _claimed_step(store)
    await store.put(make_checkpoint("other", 0, next=("n",)))

    async def listed(status: str) -> list[str]:
        page = await store.list_threads_page(status=status)  # type: ignore[arg-type]
        return [info.thread for info in page.threads]

    ambiguous = await store.record_operation(
        record, record.tool_journal[0].mark_ambiguous(), claim_token="owner-a"
    )
    suspended = await store.suspend(ambiguous, claim_token="owner-a")
    assert await listed("reconciliation_required") == ["t"]
    assert await listed("running") == ["other"]
    await store.put(make_checkpoint("t", 1, next=("n",)))  # a put keeps what the record says
    [info] = [i for i in await store.list_threads() if i.thread == "t"]
    assert (info.latest_step, info.run_status, info.status) == (
        1,
        "reconciliation_required",
        "reconciliation_required",
    )
    aborted = replace(
        suspended,
        status=CheckpointStatus.FAILED,
        terminal_result={"status": "failed", "error_code": OPERATOR_ABORT_CODE},
    )
    await store.finalize(aborted)
    assert await listed("failed") == ["t"] and await listed("reconciliation_required") == []
    await store.delete_thread("t")
    await store.put(make_checkpoint("t", 0, next=("n",)))
    assert await listed("running") == ["other", "t"] and await listed("failed") == []


async def test_a_first_step_takes_the_status_its_record_already_imposes(
    store: PostgresCheckpointer,
) -> None:
    record = await claimed(store, "t")
    started = make_tool_entry("t", 1).start()
    record = await store.record_operation(record, started, claim_token="owner-a")
    ambiguous = await store.record_operation(
        record, record.tool_journal[0].mark_ambiguous(), claim_token="owner-a"
    )
    await store.suspend(ambiguous, claim_token="owner-a")  # before the thread's first step
    await store.put(make_checkpoint("t", 0, next=("n",)))
    [info] = await store.list_threads()
    assert info.run_status == "reconciliation_required"


async def test_a_damaged_run_status_raises(
    admin: Connection, table: str, store: PostgresCheckpointer
) -> None:
    await store.put(make_checkpoint("t", 0))
    await admin.execute(f"UPDATE \"{table}_threads\" SET run_status = 'paused'")
    with pytest.raises(Exception, match="run status is damaged"):
        await store.list_threads()


# -- one pool, one database ----------------------------------------------------------


async def test_every_part_uses_one_pool(admin: Connection, table: str) -> None:
    app = f"af_{uuid.uuid4().hex[:12]}"
    async with PostgresCheckpointer(f"{DSN}?application_name={app}", table=table) as store:
        await store.put(make_checkpoint("t", 0))
        await store.create(make_record("t"))
        await store.append_once("e-1", event_payload_digest(EVENT), EVENT)
        await store.replay("t")
        backends = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app
        )
    assert backends == 1  # one kept connection served all three parts, one after the other


def test_database_names_the_tables_without_credentials() -> None:
    same = [
        PostgresCheckpointer("postgresql://agent:s3cret@db.example:5433/app", table="cp"),
        PostgresCheckpointer("postgresql://other@db.example:5433/app?sslmode=disable", table="cp"),
        PostgresCheckpointer("postgresql://db.example:5433/?dbname=app&user=x", table="cp"),
    ]
    assert len({store.database for store in same}) == 1
    assert "s3cret" not in same[0].database and "agent" not in same[0].database
    assert (
        from_url("postgresql://agent@db.example:5433/app").database
        == PostgresCheckpointer(
            "postgresql://agent@db.example:5433/app", namespace="tenant"
        ).database
    )  # the namespace is the store's other half, not the database
    others = {
        PostgresCheckpointer("postgresql://agent@db.example:5433/other", table="cp").database,
        PostgresCheckpointer("postgresql://agent@db.example:5434/app", table="cp").database,
        PostgresCheckpointer("postgresql://agent@db.example:5433/app", table="cq").database,
        PostgresCheckpointer("postgresql://a@db.example:5433/app", table="cp", schema="s").database,
        same[0].database,
    }
    assert len(others) == 5


async def test_from_url_closing_and_an_injected_pool(table: str) -> None:
    store = from_url(DSN, namespace="t")
    assert store.namespace == "t" and "checkpoints" in repr(store)
    await store.close()
    await store.close()
    for call in (store.load("run-1"), store.replay("run-1"), store.get("t")):
        with pytest.raises(StoreClosed):
            await call
    pool = await logging_pool([])
    try:
        async with PostgresCheckpointer(pool=pool, table=table) as borrowed:
            await borrowed.create(make_record())
        assert await pool.fetchval("SELECT 1") == 1  # the caller's pool stays open
    finally:
        await pool.close()


async def test_an_unreachable_server_fails_every_part_retryably() -> None:
    async with PostgresCheckpointer("postgresql://postgres@127.0.0.1:1/test") as store:
        for operation, call in (
            ("load", store.load("run-1")),
            ("append_once", store.append_once("e", event_payload_digest(EVENT), EVENT)),
            ("delete", store.delete("t")),
        ):
            with pytest.raises(StoreUnavailable) as caught:
                await call
            assert caught.value.__cause__ is not None and "127.0.0.1:1" in str(caught.value)
            assert f"during {operation}" in str(caught.value)


async def test_text_postgresql_cannot_hold_is_refused_and_nothing_stored(
    store: PostgresCheckpointer,
) -> None:
    event = {"type": "step", "run_id": "run-a"}
    await store.create(make_record())
    for bad in ("nul\x00", "\ud800"):
        with pytest.raises(InvalidArgument):
            await store.append_once(bad, event_payload_digest(event), event)
        with pytest.raises(InvalidArgument):
            await take(store, bad)
    assert (await store.replay("run-a")).events == []
    loaded = await store.load("run-1")
    assert loaded is not None and (loaded.revision, loaded.claim_token) == (0, None)
