"""SQLite-specific behaviour beyond the shared conformance suite."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.sqlite import SCHEMA_VERSION, SqliteCheckpointer
from agentflow.checkpoint.sqlite import checkpoints as backend
from agentflow.checkpoint.sqlite import sql as statements
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    IncompatibleSchema,
    InvalidArgument,
    InvalidThreadId,
    StoreUnavailable,
)


def _sqlite_threads() -> set[threading.Thread]:
    """Our worker threads only: asyncio's executor may start threads of its own meanwhile."""
    return {t for t in threading.enumerate() if t.name.startswith("agentflow-sqlite")}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints.db"


@contextlib.contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Hold the file's write lock from another connection, as another process would."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def _stored_version(path: Path) -> Any:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(
            "SELECT value FROM agentflow_meta WHERE key = 'schema_version'"
        ).fetchone()[0]


async def test_schema_version_recorded_and_newer_file_refused(db: Path) -> None:
    async with SqliteCheckpointer(db) as cp:
        await cp.put(make_checkpoint("t", 0))
    assert _stored_version(db) == SCHEMA_VERSION == 5
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE agentflow_meta SET value = ?", (SCHEMA_VERSION + 1,))
    async with SqliteCheckpointer(db) as cp:
        with pytest.raises(IncompatibleSchema, match="newer") as info:
            await cp.put(make_checkpoint("t", 1))
        assert not info.value.retryable and info.value.code == "incompatible_schema"
        with pytest.raises(CheckpointError, match="upgrade agentflow"):
            await cp.get("t")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(*) FROM agentflow_checkpoints").fetchone() == (1,)


@pytest.mark.parametrize("bad", ["fast", "", "FULL; DROP TABLE x", 2, None])
def test_bad_synchronous_is_refused(db: Path, bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        SqliteCheckpointer(db, synchronous=bad)


@pytest.mark.parametrize("bad", [{"busy_timeout": -1}, {"busy_timeout": "5"}, {"path": ":memory:"}])
def test_bad_options_are_refused(db: Path, bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        SqliteCheckpointer(**{"path": db, **bad})


async def test_synchronous_is_normalised_and_usable(db: Path) -> None:
    async with SqliteCheckpointer(db, synchronous="normal") as cp:
        assert cp.synchronous == "NORMAL"
        await cp.put(make_checkpoint("t", 0))
    async with SqliteCheckpointer(db) as cp:
        assert cp.synchronous == "FULL"
        assert await cp.get("t") is not None


async def test_group_commit_is_durable_and_isolates_each_conflict(db: Path) -> None:
    async with SqliteCheckpointer(db) as cp:
        for i in range(10):
            await cp.put(make_checkpoint(f"cas-{i}", 0, state={"v": "original"}))
        with write_lock(db):
            # The writer takes this put alone and waits for the lock; everything below
            # queues behind it and is applied as one group once the lock is released.
            first = asyncio.create_task(cp.put(make_checkpoint("first", 0)))
            await asyncio.sleep(0.05)
            calls = [cp.put(make_checkpoint(f"new-{i}", 0)) for i in range(40)]
            calls += [
                cp.put(make_checkpoint(f"cas-{i}", 0, state={"v": "won"}), if_revision=1)
                for i in range(5)
            ]
            calls += [
                cp.put(make_checkpoint(f"cas-{i}", 0, state={"v": "lost"}), if_revision=0)
                for i in range(5, 10)
            ]
            # Same step and expectation as cas-0's winner above: decided in order, it loses.
            calls.append(cp.put(make_checkpoint("cas-0", 0, state={"v": "late"}), if_revision=1))
            group = asyncio.gather(*calls, return_exceptions=True)
            await asyncio.sleep(0.05)
            assert not first.done()
        assert await first == "first:0"
        results = await group
    assert results[:45] == [f"new-{i}:0" for i in range(40)] + [f"cas-{i}:0" for i in range(5)]
    conflicts = [c for c in results[45:] if isinstance(c, CheckpointConflict)]
    assert len(conflicts) == len(results) - 45, results
    assert [(c.expected, c.actual) for c in conflicts] == [(0, 1)] * 5 + [(1, 2)]

    async with SqliteCheckpointer(db) as reopened:
        for i in range(40):
            got = await reopened.get(f"new-{i}")
            assert got is not None and got.revision == 1
        for i in range(10):
            got = await reopened.get(f"cas-{i}")
            assert got is not None
            expected = ("won", 2) if i < 5 else ("original", 1)
            assert (got.state["v"], got.revision) == expected
        assert len(await reopened.list_threads(limit=1_000)) == 51


async def test_oversized_put_fails_alone_in_its_group(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend, "_MAX_PAYLOAD", 2_000)
    async with SqliteCheckpointer(db) as cp:
        await cp.put(make_checkpoint("warm", 0))
        results = await asyncio.gather(
            cp.put(make_checkpoint("small", 0)),
            cp.put(make_checkpoint("big", 0, state={"b": "x" * 5_000})),
            cp.put(make_checkpoint("small", 1)),
            return_exceptions=True,
        )
        assert results[0] == "small:0" and results[2] == "small:1"
        assert isinstance(results[1], InvalidArgument) and "'big'" in str(results[1])
        assert await cp.get("big") is None


async def test_history_mixes_large_and_small_steps_across_batches(db: Path) -> None:
    big = {"blob": "b" * (backend._DECODE_ON_LOOP_MAX + 1)}
    # Step 255 ends the first batch and is decoded on the reader thread: the
    # next batch must still start after it.
    big_steps = {0, 255, 299}
    async with SqliteCheckpointer(db) as cp:
        await asyncio.gather(
            *(
                cp.put(make_checkpoint("t", s, state=big if s in big_steps else {"s": s}))
                for s in range(300)
            )
        )
        got = [c async for c in cp.history("t")]
    assert [c.step for c in got] == list(range(300))
    assert all((c.state == big) == (c.step in big_steps) for c in got)


async def test_reads_do_not_wait_behind_the_writer(db: Path) -> None:
    async with SqliteCheckpointer(db) as cp:
        await cp.put(make_checkpoint("t", 0))
        with write_lock(db):
            pending = asyncio.create_task(cp.put(make_checkpoint("t", 1)))
            await asyncio.sleep(0.02)
            got = await cp.get("t")
            assert got is not None and got.step == 0 and not pending.done()
        await pending
        latest = await cp.get("t")
        assert latest is not None and latest.step == 1


async def test_lock_held_beyond_busy_timeout_is_store_unavailable(db: Path) -> None:
    async with SqliteCheckpointer(db, busy_timeout=0.05) as cp:
        await cp.put(make_checkpoint("t", 0))
        with write_lock(db), pytest.raises(StoreUnavailable) as info:
            await cp.put(make_checkpoint("t", 1))
        assert info.value.retryable and isinstance(info.value.__cause__, sqlite3.OperationalError)
        assert await cp.get("t", 1) is None
        await cp.put(make_checkpoint("t", 1))
        assert await cp.get("t", 1) is not None


async def test_failed_open_is_retried_on_the_next_call(db: Path) -> None:
    async with SqliteCheckpointer(db, busy_timeout=0.05) as cp:
        with write_lock(db), pytest.raises(StoreUnavailable):
            await cp.put(make_checkpoint("t", 0))  # cannot even create the schema yet
        await cp.put(make_checkpoint("t", 0))
        got = await cp.get("t")
    assert got is not None and got.revision == 1


async def test_close_stops_threads_and_connections(db: Path) -> None:
    before = _sqlite_threads()
    cp = SqliteCheckpointer(db)
    assert _sqlite_threads() == before  # nothing starts before first use
    await cp.put(make_checkpoint("t", 0))
    assert await cp.get("t") is not None
    assert len(_sqlite_threads() - before) == 2
    await cp.close()
    await cp.close()
    assert _sqlite_threads() - before == set()
    # The last connection to close folds the WAL back into the file and removes it.
    assert not await asyncio.to_thread(Path(f"{db}-wal").exists)
    with pytest.raises(CheckpointError, match="closed"):
        await cp.get("t")


async def test_checkpointers_on_one_file_share_their_threads(db: Path) -> None:
    before = _sqlite_threads()
    async with SqliteCheckpointer(db, namespace="a") as a, SqliteCheckpointer(db) as b:
        writes = [cp.put(make_checkpoint("t", i)) for i in range(20) for cp in (a, b)]
        await asyncio.gather(*writes)
        assert len(_sqlite_threads() - before) == 2
        async with SqliteCheckpointer(db, synchronous="NORMAL") as c:
            assert await c.get("t") is not None  # other settings, threads of its own
            assert len(_sqlite_threads() - before) == 4
        await a.close()
        latest = await b.get("t")
        assert latest is not None and latest.step == 19 and latest.revision == 1
        assert len(_sqlite_threads() - before) == 2
    assert _sqlite_threads() - before == set()


async def test_close_finishes_queued_writes(db: Path) -> None:
    cp = SqliteCheckpointer(db)
    writes = [asyncio.create_task(cp.put(make_checkpoint("t", i))) for i in range(20)]
    await asyncio.sleep(0)
    await cp.close()
    assert [await w for w in writes] == [f"t:{i}" for i in range(20)]
    async with SqliteCheckpointer(db) as again:
        assert [c.step async for c in again.history("t")] == list(range(20))


async def test_slow_encoding_never_blocks_the_loop(db: Path) -> None:
    stall = 0.3

    def slow_redact(value: Any) -> Any:
        time.sleep(stall)  # stands for a heavy redactor walking a huge state
        return value

    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.005)

    async with SqliteCheckpointer(db, redact=slow_redact) as cp:
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        await cp.put(make_checkpoint("t", 0, state={"blob": "x" * 5_000_000}))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        got = await cp.get("t")
    assert got is not None and len(got.state["blob"]) == 5_000_000
    # Each redaction runs on the writer thread; on the loop, one tick gap would span it.
    longest_gap = max(b - a for a, b in itertools.pairwise(ticks))
    assert len(ticks) > 2 and longest_gap < stall * 2 / 3, (len(ticks), longest_gap)


async def test_cancelled_put_leaves_the_checkpointer_working(db: Path) -> None:
    async with SqliteCheckpointer(db) as cp:
        task = asyncio.create_task(cp.put(make_checkpoint("t", 0, state={"b": "x" * 1_000_000})))
        await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await cp.put(make_checkpoint("t", 1))
        latest = await cp.get("t")
    assert latest is not None and latest.step == 1


@pytest.mark.parametrize("damage", ["not-a-database", "garbled-pages"])
async def test_corrupted_file_raises_typed_error(db: Path, damage: str) -> None:
    if damage == "garbled-pages":
        async with SqliteCheckpointer(db) as cp:
            for step in range(20):
                await cp.put(make_checkpoint("t", step, state={"pad": "p" * 5_000}))
    original = await asyncio.to_thread(_damage, db, damage)
    async with SqliteCheckpointer(db) as cp:
        with pytest.raises(CheckpointCorrupted) as info:
            await cp.get("t")
        assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
        with pytest.raises(CheckpointCorrupted):
            await cp.put(make_checkpoint("t", 99))
    assert await asyncio.to_thread(db.read_bytes) == original


def _damage(db: Path, damage: str) -> bytes:
    if damage == "not-a-database":
        db.write_bytes(b"this is not a database, just text. " * 200)
    else:
        data = bytearray(db.read_bytes())
        data[4096:] = b"\xa5" * (len(data) - 4096)  # keep the header, garble every page
        db.write_bytes(bytes(data))
    return db.read_bytes()


async def test_unencodable_thread_id_is_refused(db: Path) -> None:
    async with SqliteCheckpointer(db) as cp:
        with pytest.raises(InvalidThreadId):
            await cp.put(make_checkpoint("lone-\ud800", 0))
        with pytest.raises(InvalidThreadId):
            await cp.get("lone-\ud800")
        assert await cp.list_threads() == []


def test_hot_queries_seek_an_index(db: Path) -> None:
    asyncio.run(_create(db))
    queries = [
        (statements.GET_LATEST, ("", "t")),
        (statements.HISTORY, ("", "t", 5, 2**63 - 1, 256)),
        (statements.HISTORY_NEWEST_FIRST, ("", "t", -1, 90, 256)),
        (statements.LIST_AFTER, ("", "t", 100)),
        (statements.LIST_STATUS_AFTER, ("", "done", "t", 100)),
        (statements.DUE, ("", 10**15, 0, "", 100)),
    ]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for sql, args in queries:
            plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            assert "SEARCH" in plan and "SCAN" not in plan and "TEMP B-TREE" not in plan, plan
        # a chain's steps: one index probe each, over the JSON array of steps asked for
        plan = " ".join(
            row[3]
            for row in conn.execute(f"EXPLAIN QUERY PLAN {statements.STEPS}", ("", "t", "[1]"))
        )
        assert "SEARCH agentflow_checkpoints USING INDEX" in plan, plan
        assert "SCAN agentflow_checkpoints" not in plan, plan


async def _create(db: Path) -> None:
    async with SqliteCheckpointer(db) as cp:
        await cp.put(make_checkpoint("t", 0))


def _put_in_child(path: str) -> None:
    async def put() -> None:
        async with SqliteCheckpointer(path) as cp:
            await cp.put(make_checkpoint("child", 0))

    asyncio.run(put())


async def test_a_forked_child_opens_its_own_threads(db: Path) -> None:
    async with SqliteCheckpointer(db) as cp:
        await cp.put(make_checkpoint("parent", 0))
        # The parent's threads stay alive and registered while the child starts.
        child = multiprocessing.get_context("fork").Process(target=_put_in_child, args=(str(db),))
        child.start()
        await asyncio.to_thread(child.join, 60)
        if child.exitcode is None:
            child.kill()
        assert child.exitcode == 0
        assert await cp.get("child") is not None


PROCESSES = 4
PUTS_PER_PROCESS = 250


def _hammer(path: str) -> None:
    asyncio.run(_hammer_async(path))


async def _hammer_async(path: str) -> None:
    async with SqliteCheckpointer(path, busy_timeout=60) as cp:

        async def writer(count: int) -> None:
            for _ in range(count):
                await cp.put(make_checkpoint("shared", 0, state={"pid": os.getpid()}))

        # Several tasks per process: group commits inside, lock contention across.
        await asyncio.gather(*(writer(PUTS_PER_PROCESS // 5) for _ in range(5)))


async def test_unconditional_puts_from_four_processes_never_lose_a_revision(db: Path) -> None:
    await _create(db)
    spawn = multiprocessing.get_context("spawn")
    children = [spawn.Process(target=_hammer, args=(str(db),)) for _ in range(PROCESSES)]
    for child in children:
        child.start()
    for child in children:
        await asyncio.to_thread(child.join, 120)
        assert child.exitcode == 0
    async with SqliteCheckpointer(db) as cp:
        got = await cp.get("shared", 0)
    assert got is not None and got.revision == PROCESSES * PUTS_PER_PROCESS
