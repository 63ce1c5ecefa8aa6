"""PostgreSQL-specific behaviour beyond the shared conformance suite."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import orjson
import pytest

from agentflow.checkpoint import postgres
from agentflow.checkpoint.postgres import SCHEMA_VERSION, PostgresCheckpointer
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
from tests.backends.postgres import (
    DSN,
    admin_connection,
    blocked_backend,
    drop_tables,
    logging_pool,
    summary_drift,
    unique_table,
)

Log = list[tuple[str, tuple[object, ...]]]


@pytest.fixture
async def admin() -> AsyncIterator[asyncpg.Connection]:
    conn = await admin_connection()
    yield conn
    await conn.close()


@pytest.fixture
async def table(admin: asyncpg.Connection) -> AsyncIterator[str]:
    name = unique_table()
    yield name
    await drop_tables(admin, name)


async def _connections(admin: asyncpg.Connection, app: str) -> int:
    count: int = await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app
    )
    return count


async def _settle() -> None:
    """Query loggers run through call_soon; let them drain."""
    for _ in range(3):
        await asyncio.sleep(0)


# -- ownership and lifecycle ----------------------------------------------------


async def test_injected_pool_stays_open(table: str) -> None:
    pool = await asyncpg.create_pool(DSN, min_size=1, max_size=2)
    try:
        async with PostgresCheckpointer(pool=pool, table=table) as cp:
            await cp.put(make_checkpoint("t", 0))
        await cp.close()
        assert await pool.fetchval("SELECT 1") == 1
        async with PostgresCheckpointer(pool=pool, table=table) as again:
            assert await again.get("t") is not None
    finally:
        await pool.close()


async def test_own_pool_is_lazy_and_closed(admin: asyncpg.Connection, table: str) -> None:
    app = f"af_{uuid.uuid4().hex[:12]}"
    cp = PostgresCheckpointer(f"{DSN}?application_name={app}", table=table)
    assert await _connections(admin, app) == 0
    await asyncio.gather(*(cp.get(f"t{i}") for i in range(20)))
    assert 1 <= await _connections(admin, app) <= 10
    await cp.close()
    await cp.close()
    for _ in range(200):
        if await _connections(admin, app) == 0:
            break
        await asyncio.sleep(0.01)
    assert await _connections(admin, app) == 0


async def test_kept_connections_never_starve_setup(admin: asyncpg.Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        await cp.put(make_checkpoint("t", 0))
        locker = await admin_connection()
        try:
            await locker.execute(f'BEGIN; LOCK TABLE "{table}_threads" IN ACCESS EXCLUSIVE MODE')
            puts = [asyncio.ensure_future(cp.put(make_checkpoint(f"t{i}", 0))) for i in range(10)]
            for _ in range(500):  # until all ten pooled connections wait on the lock
                blocked = await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                    locker.get_server_pid(),
                )
                if blocked == 10:
                    break
                await asyncio.sleep(0.01)
            assert blocked == 10
        finally:
            await locker.close()
        await asyncio.gather(*puts)  # every connection of the pool is now kept, idle
        await asyncio.wait_for(cp.setup(), timeout=10)
        assert await asyncio.wait_for(cp.prune("t", before_step=1), timeout=10) == 1


async def test_long_idle_kept_connection_is_replaced(
    admin: asyncpg.Connection, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = f"af_{uuid.uuid4().hex[:12]}"
    backends = "SELECT array_agg(pid) FROM pg_stat_activity WHERE application_name = $1"
    async with PostgresCheckpointer(f"{DSN}?application_name={app}", table=table) as cp:
        await cp.put(make_checkpoint("t", 0))
        before = set(await admin.fetchval(backends, app))
        monkeypatch.setattr(postgres, "_KEEP_IDLE_SECONDS", 0.0)
        await cp.put(make_checkpoint("t", 1))
        for _ in range(200):
            after = set(await admin.fetchval(backends, app) or [])
            if not before & after:
                break
            await asyncio.sleep(0.01)
        assert after and not before & after
        got = await cp.get("t")
        assert got is not None and got.step == 1


async def test_first_use_runs_setup_once_under_concurrency(table: str) -> None:
    log: Log = []
    pool = await logging_pool(log)
    try:
        cp = PostgresCheckpointer(pool=pool, table=table)
        await asyncio.gather(*(cp.put(make_checkpoint(f"t{i}", 0)) for i in range(16)))
        await asyncio.gather(*(cp.get(f"t{i}") for i in range(16)))
        await _settle()
    finally:
        await pool.close()
    locks = [q for q, _ in log if "pg_advisory_xact_lock" in q]
    assert len(locks) == 1
    assert sum("to_regclass" in q for q, _ in log) == 1


async def test_unreachable_server_is_retryable() -> None:
    async with PostgresCheckpointer("postgresql://postgres@127.0.0.1:1/test", table="x") as cp:
        with pytest.raises(StoreUnavailable) as info:
            await cp.get("t")
    assert info.value.retryable and isinstance(info.value.__cause__, OSError)


# -- identifiers and setup --------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["", "1abc", "a-b", 'x"; DROP TABLE t; --', "Upper", "a" * 56, "ü", "a b", None, 7],
)
def test_bad_identifiers_are_refused(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        PostgresCheckpointer(table=bad)
    if bad is not None:
        with pytest.raises(InvalidArgument):
            PostgresCheckpointer(table="ok", schema=bad)


async def test_reserved_word_table_in_own_schema(admin: asyncpg.Connection) -> None:
    schema = f"s_{uuid.uuid4().hex[:12]}"
    try:
        async with PostgresCheckpointer(DSN, table="select", schema=schema) as cp:
            await cp.put(make_checkpoint("t", 0))
            assert (await cp.get("t")) is not None
        names = await admin.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", schema
        )
        assert [r[0] for r in names] == ["select", "select_meta", "select_threads"]
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def test_setup_is_idempotent_and_concurrent(admin: asyncpg.Connection, table: str) -> None:
    checkpointers = [PostgresCheckpointer(DSN, table=table) for _ in range(4)]
    try:
        await asyncio.gather(*(cp.setup() for cp in checkpointers for _ in range(5)))
        await checkpointers[0].put(make_checkpoint("t", 0))
        await checkpointers[1].setup()
        assert (await checkpointers[2].get("t")) is not None
    finally:
        await asyncio.gather(*(cp.close() for cp in checkpointers))
    rows = await admin.fetch(f'SELECT component, version FROM "{table}_meta"')
    assert [tuple(r) for r in rows] == [("checkpoints", SCHEMA_VERSION)]
    compression = await admin.fetchval(
        "SELECT attcompression FROM pg_attribute WHERE attrelid = $1::regclass"
        " AND attname = 'payload'",
        table,
    )
    assert compression == b"l"  # lz4


async def test_newer_schema_version_is_refused(admin: asyncpg.Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        await cp.setup()
    await admin.execute(f'UPDATE "{table}_meta" SET version = $1', SCHEMA_VERSION + 1)
    async with PostgresCheckpointer(DSN, table=table) as cp:
        with pytest.raises(IncompatibleSchema) as info:
            await cp.put(make_checkpoint("t", 0))
        assert info.value.code == "incompatible_schema" and not info.value.retryable
        assert f"version {SCHEMA_VERSION + 1}" in str(info.value) and "upgrade" in str(info.value)
        with pytest.raises(CheckpointError):
            await cp.setup()
    assert await admin.fetchval(f'SELECT count(*) FROM "{table}"') == 0


# -- round trips and query plans ---------------------------------------------------


async def test_each_call_is_one_statement(table: str) -> None:
    log: Log = []
    pool = await logging_pool(log)
    try:
        cp = PostgresCheckpointer(pool=pool, table=table)
        await cp.put(make_checkpoint("t", 0))
        await _settle()
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: cp.put(make_checkpoint("t", 0)),
            lambda: cp.put(make_checkpoint("t", 0), if_revision=2),
            lambda: cp.put(make_checkpoint("t", 1), if_revision=0),
            lambda: cp.get("t"),
            cp.list_threads_page,
        ]
        for call in calls:
            log.clear()
            await call()
            await _settle()
            assert len(log) == 1, log
        log.clear()
        await cp.put(make_checkpoint("t", 1))
        await _settle()
        (put_sql, _), *_ = log
        assert f'INSERT INTO "{table}"' in put_sql and f'"{table}_threads"' in put_sql
        log.clear()
        with pytest.raises(CheckpointConflict):
            await cp.put(make_checkpoint("t", 0), if_revision=1)
        await _settle()
        assert len(log) == 2 and log[1][0].lstrip().startswith("SELECT revision")
    finally:
        await pool.close()


async def test_reads_are_index_probes(admin: asyncpg.Connection, table: str) -> None:
    log: Log = []
    pool = await logging_pool(log)
    try:
        cp = PostgresCheckpointer(pool=pool, table=table)
        await cp.put(make_checkpoint("probe", 0))
        await admin.execute(
            f"""INSERT INTO "{table}" SELECT '', 'fill-' || (g / 100), g % 100, 1, 0, '', false,
                true, NULL, '\\x00' FROM generate_series(0, 29999) AS g;
            INSERT INTO "{table}_threads" SELECT '', 'fill-' || g, 99, false, true, '', NULL
                FROM generate_series(0, 299) AS g;
            ANALYZE "{table}"; ANALYZE "{table}_threads";"""
        )
        log.clear()
        await cp.get("probe")
        await cp.list_threads_page(limit=10)
        _ = [c async for c in cp.history("probe")]
        await _settle()
    finally:
        await pool.close()
    assert len(log) == 3
    for query, args in log:
        plan = orjson.loads(await admin.fetchval(f"EXPLAIN (FORMAT JSON) {query}", *args))
        text = orjson.dumps(plan).decode()
        assert "Seq Scan" not in text and '"Sort"' not in text, text
        assert "Index" in text


# -- summary table -------------------------------------------------------------


async def test_summary_follows_prune_and_delete(admin: asyncpg.Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        for step in range(5):
            when = f"2026-01-0{5 - step}T00:00:00+00:00"  # the latest step is the oldest
            await cp.put(make_checkpoint("t", step, ts=when, interrupted=step == 3, next=("n",)))
        assert await cp.prune("t", older_than="2026-01-01T12:00:00Z") == 1
        (info,) = await cp.list_threads()
        assert (info.latest_step, info.interrupted, info.ts) == (
            3,
            True,
            "2026-01-02T00:00:00+00:00",
        )
        assert await summary_drift(admin, table) == []
        assert await cp.prune("t", before_step=99) == 4
        assert await cp.list_threads() == [] and await summary_drift(admin, table) == []


async def test_summary_survives_racing_writes(admin: asyncpg.Connection, table: str) -> None:
    rng = random.Random(3)
    async with (
        PostgresCheckpointer(DSN, table=table) as a,
        PostgresCheckpointer(DSN, table=table) as b,
    ):
        for _ in range(6):
            calls: list[Any] = []
            for _ in range(60):
                cp, thread = rng.choice((a, b)), f"t{rng.randrange(3)}"
                roll = rng.random()
                if roll < 0.75:
                    step = rng.randrange(12)
                    calls.append(cp.put(make_checkpoint(thread, step, interrupted=step % 2 == 1)))
                elif roll < 0.95:
                    calls.append(cp.prune(thread, before_step=rng.randrange(12)))
                else:
                    calls.append(cp.delete_thread(thread))
            await asyncio.gather(*calls)
            assert await summary_drift(admin, table) == []


# -- faults ----------------------------------------------------------------------


async def _kill_while_blocked(admin: asyncpg.Connection, lock_table: str, call: Any) -> Any:
    """Run ``call`` while ``lock_table`` is locked, terminate its backend, return the error."""
    locker = await admin_connection()
    try:
        await locker.execute(f'BEGIN; LOCK TABLE "{lock_table}" IN ACCESS EXCLUSIVE MODE')
        task = asyncio.ensure_future(call)
        await admin.execute("SELECT pg_terminate_backend($1)", await blocked_backend(admin, locker))
        with pytest.raises(StoreUnavailable) as info:
            await task
    finally:
        await locker.close()
    return info.value


async def test_killed_put_stores_nothing_and_pool_recovers(
    admin: asyncpg.Connection, table: str
) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        await cp.put(make_checkpoint("t", 0))
        err = await _kill_while_blocked(admin, f"{table}_threads", cp.put(make_checkpoint("t", 1)))
        assert err.retryable
        assert isinstance(err.__cause__, asyncpg.PostgresError | asyncpg.InterfaceError | OSError)
        assert await cp.get("t", 1) is None
        assert [i.latest_step for i in await cp.list_threads()] == [0]
        await cp.put(make_checkpoint("t", 1))
        assert (await cp.get("t")).step == 1  # type: ignore[union-attr]


async def test_killed_prune_rolls_back(admin: asyncpg.Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        for step in range(4):
            await cp.put(make_checkpoint("t", step))
        await _kill_while_blocked(admin, f"{table}_threads", cp.prune("t", before_step=3))
        assert [c.step async for c in cp.history("t")] == [0, 1, 2, 3]
        assert await cp.prune("t", before_step=3) == 3
        assert await summary_drift(admin, table) == []


async def test_idle_connections_killed_between_calls(admin: asyncpg.Connection, table: str) -> None:
    app = f"af_{uuid.uuid4().hex[:12]}"
    async with PostgresCheckpointer(f"{DSN}?application_name={app}", table=table) as cp:
        await asyncio.gather(*(cp.put(make_checkpoint(f"t{i}", 0)) for i in range(4)))
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = $1",
            app,
        )
        assert killed >= 1
        for _ in range(500):  # termination is asynchronous: wait until they are gone
            if await _connections(admin, app) == 0:
                break
            await asyncio.sleep(0.01)
        failures = 0
        for _ in range(killed + 1):
            try:
                assert await cp.get("t0") is not None
                break
            except StoreUnavailable:
                failures += 1
        assert 1 <= failures <= killed
        assert [i.thread for i in await cp.list_threads()] == ["t0", "t1", "t2", "t3"]


async def test_cancellation_is_not_wrapped(admin: asyncpg.Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        await cp.put(make_checkpoint("t", 0))
        locker = await admin_connection()
        try:
            await locker.execute(f'BEGIN; LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
            task = asyncio.ensure_future(cp.put(make_checkpoint("t", 1)))
            await blocked_backend(admin, locker)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await locker.close()
        assert await cp.get("t", 1) is None
        await cp.put(make_checkpoint("t", 1))
        assert [c.step async for c in cp.history("t")] == [0, 1]


# -- hostile input and concurrency ------------------------------------------------


async def test_hostile_namespaces_and_nul_in_state(table: str) -> None:
    state = {"nul": "a\x00b", "key\x00": ["\x00"], "sql": "'); DELETE FROM x; --"}
    async with (
        PostgresCheckpointer(DSN, table=table, namespace="'; DROP TABLE t; --") as a,
        PostgresCheckpointer(DSN, table=table, namespace="%") as b,
    ):
        await a.put(make_checkpoint("t", 0, state=state))
        got = await a.get("t")
        assert got is not None and got.state == state
        assert await b.get("t") is None and await b.list_threads() == []


async def test_unstorable_ids_are_refused_and_store_nothing(
    admin: asyncpg.Connection, table: str
) -> None:
    rng = random.Random(5)
    huge = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(3_000))
    with pytest.raises(InvalidArgument):
        PostgresCheckpointer(DSN, table=table, namespace="\ud800")
    async with PostgresCheckpointer(DSN, table=table) as cp:
        with pytest.raises(InvalidThreadId):
            await cp.put(make_checkpoint("lone\ud800", 0))
        with pytest.raises(InvalidThreadId):
            await cp.get("lone\udfff")
        with pytest.raises(InvalidArgument) as info:
            await cp.put(make_checkpoint(huge, 0))
        assert isinstance(info.value.__cause__, asyncpg.PostgresError)
        with pytest.raises(InvalidArgument):
            await cp.put(make_checkpoint("t", 0), if_revision=-1)
        assert await cp.list_threads() == []
    assert await admin.fetchval(f'SELECT count(*) FROM "{table}"') == 0


async def test_swapped_payload_is_corruption(admin: asyncpg.Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("t", 1))
        await admin.execute(
            f'UPDATE "{table}" SET payload = (SELECT payload FROM "{table}" WHERE step = 0)'
            " WHERE step = 1"
        )
        with pytest.raises(CheckpointCorrupted):
            await cp.get("t")


async def test_sixteen_racers_across_pools(table: str) -> None:
    cps = [PostgresCheckpointer(DSN, table=table) for _ in range(4)]
    try:
        for expected in (0, 1, 2):
            results = await asyncio.gather(
                *(
                    cps[i % 4].put(make_checkpoint("race", 0, state={"w": i}), if_revision=expected)
                    for i in range(16)
                ),
                return_exceptions=True,
            )
            losers = [r for r in results if isinstance(r, CheckpointConflict)]
            assert sum(isinstance(r, str) for r in results) == 1 and len(losers) == 15
            assert {e.actual for e in losers} == {expected + 1}
        await asyncio.gather(*(cps[i % 4].put(make_checkpoint("race", 0)) for i in range(16)))
        final = await cps[0].get("race", 0)
        assert final is not None and final.revision == 3 + 16
    finally:
        await asyncio.gather(*(cp.close() for cp in cps))


async def test_history_batches_adapt_to_state_size(table: str) -> None:
    log: Log = []
    pool = await logging_pool(log)
    try:
        cp = PostgresCheckpointer(pool=pool, table=table)
        for step in range(150):
            await cp.put(make_checkpoint("small", step))
        for step in range(20):
            await cp.put(make_checkpoint("big", step, state={"blob": "x" * 1_000_000}))
        for thread, count in (("small", 150), ("big", 20)):
            log.clear()
            assert [c.step async for c in cp.history(thread)] == list(range(count))
            await _settle()
            limits = [args[-1] for _, args in log]
            assert limits == ([8, 1_024] if thread == "small" else [8, 2, 2, 2, 2, 2, 2, 2]), limits
    finally:
        await pool.close()


async def test_listing_is_code_point_order(table: str) -> None:
    ids = ["\uffff", "\U00010000", "\ue000", "z", "Z", "é", "a\x01", "a"]
    async with PostgresCheckpointer(DSN, table=table) as cp:
        for thread in ids:
            await cp.put(make_checkpoint(thread, 0))
        page = await cp.list_threads_page(limit=4)
        rest = await cp.list_threads_page(limit=10, cursor=page.next_cursor)
    assert [i.thread for i in page.threads + rest.threads] == sorted(ids)
