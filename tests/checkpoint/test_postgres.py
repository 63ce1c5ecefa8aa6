"""PostgreSQL-specific behaviour beyond the shared conformance suite."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import orjson
import pytest

from agentflow.checkpoint.cursor import CursorSigner
from agentflow.checkpoint.postgres import PostgresCheckpointer, connections
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    InvalidCursor,
    InvalidThreadId,
    StoreClosed,
    StoreUnavailable,
)
from tests.backends.postgres import (
    DSN,
    Connection,
    admin_connection,
    admin_session,
    blocked_backend,
    logging_pool,
    scratch_table,
    settle_logs,
    summary_drift,
)

Log = list[tuple[str, tuple[object, ...]]]

admin = pytest.fixture(admin_session)
table = pytest.fixture(scratch_table)


async def _connections(admin: Connection, app: str) -> int:
    count: int = await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app
    )
    return count


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


async def test_own_pool_is_lazy_and_closed(admin: Connection, table: str) -> None:
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


async def test_kept_connections_never_starve_setup(admin: Connection, table: str) -> None:
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
    admin: Connection, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = f"af_{uuid.uuid4().hex[:12]}"
    backends = "SELECT array_agg(pid) FROM pg_stat_activity WHERE application_name = $1"
    async with PostgresCheckpointer(f"{DSN}?application_name={app}", table=table) as cp:
        await cp.put(make_checkpoint("t", 0))
        before = set(await admin.fetchval(backends, app))
        monkeypatch.setattr(connections, "_KEEP_IDLE_SECONDS", 0.0)
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
        await settle_logs()
    finally:
        await pool.close()
    locks = [q for q, _ in log if "pg_advisory_xact_lock" in q]
    assert len(locks) == 1
    assert sum("to_regclass" in q for q, _ in log) == 1


async def test_setup_after_close_is_refused(table: str) -> None:
    cp = PostgresCheckpointer(DSN, table=table)
    await cp.setup()
    await cp.close()
    with pytest.raises(StoreClosed):
        await cp.setup()


#: Every public call, on a checkpointer whose server is unreachable.
_CALLS: dict[str, Callable[[PostgresCheckpointer], Awaitable[Any]]] = {
    "setup": lambda cp: cp.setup(),
    "put": lambda cp: cp.put(make_checkpoint("t", 0)),
    "get": lambda cp: cp.get("t"),
    "history": lambda cp: cp.history("t").__anext__(),
    "list_threads": lambda cp: cp.list_threads(offset=5),
    "list_threads_page": lambda cp: cp.list_threads_page(status="done"),
    "list_due": lambda cp: cp.list_due("2026-01-01T00:00:00Z"),
    "delete_thread": lambda cp: cp.delete_thread("t"),
    "prune": lambda cp: cp.prune("t", before_step=3),
}


@pytest.mark.parametrize("operation", sorted(_CALLS))
async def test_unreachable_server_is_retryable_and_named(operation: str) -> None:
    dsn = "postgresql://agent:s3cr3t-pw@127.0.0.1:1/test"
    async with PostgresCheckpointer(dsn, table="x") as cp:
        with pytest.raises(StoreUnavailable) as info:
            await _CALLS[operation](cp)
    message = str(info.value)
    assert info.value.retryable and isinstance(info.value.__cause__, OSError)
    assert f"during {operation}:" in message and "127.0.0.1:1" in message
    assert "s3cr3t" not in message and "agent" not in message and "_read" not in message


async def test_reading_a_cursor_first_maps_driver_errors(table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        for thread in "abc":
            await cp.put(
                make_checkpoint(
                    thread, 0, next=("n",), interrupted=True, wake_at="2026-01-01T00:00:00Z"
                )
            )
        threads = (await cp.list_threads_page(limit=1)).next_cursor
        due = (await cp.list_due("2026-01-02T00:00:00Z", limit=1)).next_cursor
    assert threads is not None and due is not None
    down = "postgresql://postgres@127.0.0.1:1/test"
    async with PostgresCheckpointer(down, table=table) as cp:
        with pytest.raises(StoreUnavailable, match="during list_threads_page"):
            await cp.list_threads_page(cursor=threads)
        with pytest.raises(StoreUnavailable, match="during list_due"):
            await cp.list_due("2026-01-02T00:00:00Z", cursor=due)


async def test_errors_name_an_injected_pools_address(admin: Connection, table: str) -> None:
    pool = await asyncpg.create_pool(DSN, min_size=1, max_size=2)
    try:
        async with PostgresCheckpointer(pool=pool, table=table) as cp:
            await cp.put(make_checkpoint("t", 0))
            await admin.execute(f'DROP TABLE "{table}"')
            with pytest.raises(CheckpointError) as info:
                await cp.get("t")
        assert "127.0.0.1:5432" in str(info.value) and "during get" in str(info.value)
        assert not info.value.retryable and info.value.__cause__ is not None
    finally:
        await pool.close()


# -- round trips and query plans ---------------------------------------------------


async def test_each_call_is_one_statement(table: str) -> None:
    log: Log = []
    pool = await logging_pool(log)
    try:
        cp = PostgresCheckpointer(pool=pool, table=table)
        await cp.put(make_checkpoint("t", 0))
        await settle_logs()
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
            await settle_logs()
            assert len(log) == 1, log
        log.clear()
        await cp.put(make_checkpoint("t", 1))
        await settle_logs()
        (put_sql, _), *_ = log
        assert f'INSERT INTO "{table}"' in put_sql and f'"{table}_threads"' in put_sql
        log.clear()
        with pytest.raises(CheckpointConflict):
            await cp.put(make_checkpoint("t", 0), if_revision=1)
        await settle_logs()
        assert len(log) == 2 and log[1][0].lstrip().startswith("SELECT revision")
    finally:
        await pool.close()


#: Filler summaries of every status; the waiting ones wake once a second from 2026.
_FILL_SUMMARIES = """INSERT INTO "{table}_threads"
    SELECT '', 'fill-' || g, 99, g % 4 > 1, g % 4 = 0, '', w, s,
        1767225600000000 + g::bigint * 1000000
    FROM generate_series(0, 2999) AS g,
        LATERAL (SELECT CASE g % 4 WHEN 0 THEN 'done' WHEN 1 THEN 'running'
            WHEN 2 THEN 'interrupted' ELSE 'waiting' END AS s) AS status,
        LATERAL (SELECT CASE WHEN s = 'waiting' THEN to_char(to_timestamp(1767225600 + g)
            AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') END AS w) AS wake"""


async def test_reads_are_index_probes(admin: Connection, table: str) -> None:
    log: Log = []
    pool = await logging_pool(log)
    try:
        cp = PostgresCheckpointer(pool=pool, table=table)
        await cp.put(make_checkpoint("probe", 0))
        await admin.execute(
            f"""INSERT INTO "{table}" SELECT '', 'fill-' || (g / 100), g % 100, 1, 0, '', false,
                true, NULL, '\\x00' FROM generate_series(0, 29999) AS g;
            {_FILL_SUMMARIES.format(table=table)};
            ANALYZE "{table}"; ANALYZE "{table}_threads";"""
        )
        log.clear()
        await cp.get("probe")
        await cp.list_threads_page(limit=10)
        for status in ("running", "interrupted", "waiting", "done"):
            page = await cp.list_threads_page(limit=10, status=status)
            assert [i.status for i in page.threads] == [status] * 10
        due = await cp.list_due("2026-01-01T00:10:00Z", limit=10)
        await cp.list_due("2026-01-01T00:10:00Z", limit=10, cursor=due.next_cursor)
        _ = [c async for c in cp.history("probe")]
        await settle_logs()
    finally:
        await pool.close()
    statements = [(q, a) for q, a in log if "cursor_secret" not in q]
    assert len(statements) == 9
    for query, args in statements:
        plan = orjson.loads(await admin.fetchval(f"EXPLAIN (FORMAT JSON) {query}", *args))
        text = orjson.dumps(plan).decode()
        assert "Seq Scan" not in text and '"Sort"' not in text, text
        assert "Index" in text


# -- summary table -------------------------------------------------------------


async def test_summary_follows_prune_and_delete(admin: Connection, table: str) -> None:
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


async def test_summary_survives_racing_writes(admin: Connection, table: str) -> None:
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


async def _kill_while_blocked(admin: Connection, lock_table: str, call: Any) -> Any:
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


async def test_killed_put_stores_nothing_and_pool_recovers(admin: Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        await cp.put(make_checkpoint("t", 0))
        err = await _kill_while_blocked(admin, f"{table}_threads", cp.put(make_checkpoint("t", 1)))
        assert err.retryable
        assert isinstance(err.__cause__, asyncpg.PostgresError | asyncpg.InterfaceError | OSError)
        assert await cp.get("t", 1) is None
        assert [i.latest_step for i in await cp.list_threads()] == [0]
        await cp.put(make_checkpoint("t", 1))
        assert (await cp.get("t")).step == 1  # type: ignore[union-attr]


async def test_killed_prune_rolls_back(admin: Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        for step in range(4):
            await cp.put(make_checkpoint("t", step))
        await _kill_while_blocked(admin, f"{table}_threads", cp.prune("t", before_step=3))
        assert [c.step async for c in cp.history("t")] == [0, 1, 2, 3]
        assert await cp.prune("t", before_step=3) == 3
        assert await summary_drift(admin, table) == []


async def test_idle_connections_killed_between_calls(admin: Connection, table: str) -> None:
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


async def test_cancellation_is_not_wrapped(admin: Connection, table: str) -> None:
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


async def test_unstorable_ids_are_refused_and_store_nothing(admin: Connection, table: str) -> None:
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


async def test_swapped_payload_is_corruption(admin: Connection, table: str) -> None:
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
            await settle_logs()
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


async def test_a_cursor_holding_nul_is_invalid(admin: Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table, namespace="n") as cp:
        for thread in "abc":
            await cp.put(make_checkpoint(thread, 0))
        assert (await cp.list_threads_page(limit=1)).next_cursor is not None
        secret = await admin.fetchval(
            f"SELECT value FROM \"{table}_meta\" WHERE component = 'cursor_secret'"
        )
        # Minted with the store's own secret: only its content is wrong.
        signer = CursorSigner(secret, "postgres", "n")
        for listing, body in (
            ("threads:", {"after": "a\x00b"}),
            ("threads:done", {"after": "\x00"}),
            ("due", {"wake_us": 0, "after": "a\x00"}),
        ):
            cursor = signer.encode(listing, body)
            with pytest.raises(InvalidCursor):
                if listing == "due":
                    await cp.list_due("2026-01-01T00:00:00Z", cursor=cursor)
                else:
                    await cp.list_threads_page(cursor=cursor, status=listing[8:] or None)  # type: ignore[arg-type]
        good = signer.encode("threads:", {"after": "a"})
        assert [i.thread for i in (await cp.list_threads_page(cursor=good)).threads] == ["b", "c"]
