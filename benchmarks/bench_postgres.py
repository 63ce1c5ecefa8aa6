"""PostgresCheckpointer against LangGraph's AsyncPostgresSaver and the raw asyncpg floor.

All three write the same ~10 KB nested states at the server's default
durability (``synchronous_commit=on``), each into its own tables in a schema
created for the run and dropped afterwards. The raw floor is the very payload
bytes agentflow stores (already encoded), inserted with one asyncpg ``INSERT``
round trip per checkpoint on a held connection, and by 8 writers sharing a
pool: what any PostgreSQL checkpointer must pay. Get-latest is measured again
after bulk-filling every store to 1,000,000 checkpoints.

The box is shared, so commit latency drifts: every measurement runs in
interleaved rounds (a slice of each subject in turn) so that drift hits all
subjects alike.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

import asyncpg
import orjson

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.postgres import PostgresCheckpointer
from benchmarks.common import (
    LangGraphWriter,
    Table,
    median,
    ms,
    nested_state,
    percentile,
    rate,
    ratio,
    time_calls,
)

DSN = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
BIG = 1_000_000
ROUNDS = 10
T = TypeVar("T")
_HEADERS = [
    "checkpointer",
    "puts/s (seq)",
    "get latest p50 (2k rows)",
    "get latest p50 (1M rows)",
    "history of 2,000 (s)",
    "8 writers puts/s",
]


class _Sizes:
    def __init__(self, quick: bool) -> None:
        self.puts = 200 if quick else 2_000
        self.gets = 100 if quick else 500
        self.writers = 8
        self.per_writer = 25 if quick else 250
        self.big = 0 if quick else BIG


class _Subject:
    """What the measurements call; each backend fills these in."""

    label = ""
    put: Callable[[str, int], Awaitable[Any]]
    get_latest: Callable[[str], Awaitable[Any]]
    history: Callable[[str], Awaitable[int]]
    fill: Callable[[int], Awaitable[None]]


async def _no_reset(conn: Any) -> None:
    return None


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _fill_sql(table: str, columns: str, values: str, n: int) -> str:
    """Insert ``n`` filler rows in one statement; ``g`` is the row number."""
    return (
        f"INSERT INTO {table} ({columns}) SELECT {values}"
        f" FROM generate_series(0, {n - 1}) AS g; ANALYZE {table};"
    )


#: Filler rows: 1,000 steps per thread, tiny payloads (never read).
_FILL_THREAD, _FILL_STEP = "'fill-' || (g / 1000)", "g % 1000"


@asynccontextmanager
async def _agentflow(schema: str, states: list[dict[str, Any]]) -> AsyncIterator[_Subject]:
    async with PostgresCheckpointer(DSN, table="bench", schema=schema) as cp:
        s = _Subject()
        s.label = "agentflow PostgresCheckpointer"

        async def put(thread: str, step: int) -> None:
            await cp.put(Checkpoint(thread=thread, step=step, state=states[step], next=("n",)))

        async def history(thread: str) -> int:
            return sum([1 async for _ in cp.history(thread)])

        async def fill(n: int) -> None:
            columns = "namespace, thread, step, revision, ts_us, ts, interrupted, done, payload"
            values = f"'', {_FILL_THREAD}, {_FILL_STEP}, 1, 0, '', false, true, '\\x7b7d'"
            summary = "namespace, thread, latest_step, interrupted, done, ts, status"
            await _admin(
                _fill_sql(f'"{schema}"."bench"', columns, values, n)
                + _fill_sql(
                    f'"{schema}"."bench_threads"',
                    summary,
                    "'', 'fill-' || g, 999, false, true, '', 'done'",
                    n // 1000,
                )
            )

        s.put, s.get_latest, s.history, s.fill = put, cp.get, history, fill
        yield s


@asynccontextmanager
async def _langgraph(schema: str, states: list[dict[str, Any]]) -> AsyncIterator[_Subject]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    dsn = f"{DSN}?options=-csearch_path%3D{schema}"
    async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        s = _Subject()
        s.label = "LangGraph AsyncPostgresSaver (1 conn)"
        put = LangGraphWriter(saver, states, versioned=True).put

        async def get_latest(thread: str) -> Any:
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            return await saver.aget_tuple(config)

        async def history(thread: str) -> int:
            config: Any = {"configurable": {"thread_id": thread}}
            return sum([1 async for _ in saver.alist(config)])

        async def fill(n: int) -> None:
            columns = "thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata"
            values = f"{_FILL_THREAD}, '', lpad(({_FILL_STEP})::text, 8, '0'), '{{}}', '{{}}'"
            await _admin(_fill_sql(f'"{schema}".checkpoints', columns, values, n))

        s.put, s.get_latest, s.history, s.fill = put, get_latest, history, fill
        yield s


@asynccontextmanager
async def _raw_floor(schema: str, blobs: list[bytes]) -> AsyncIterator[_Subject]:
    table = f'"{schema}"."raw"'
    await _admin(
        f'CREATE TABLE {table} (namespace TEXT COLLATE "C", thread TEXT COLLATE "C",'
        " step BIGINT, payload BYTEA COMPRESSION lz4, PRIMARY KEY (namespace, thread, step))"
    )
    insert = f"INSERT INTO {table} VALUES ('', $1, $2, $3)"
    select = f"SELECT payload FROM {table} WHERE namespace = '' AND thread = $1"
    conn = await asyncpg.connect(DSN)
    pool = await asyncpg.create_pool(DSN, min_size=8, max_size=8, reset=_no_reset)
    try:
        s = _Subject()
        s.label = "raw asyncpg floor (1 INSERT)"

        async def put(thread: str, step: int) -> None:
            # The sequential run owns its connection; the writers share the pool.
            target = conn if thread.startswith("seq") else pool
            await target.execute(insert, thread, step, blobs[step])

        async def get_latest(thread: str) -> Any:
            return orjson.loads(await conn.fetchval(f"{select} ORDER BY step DESC LIMIT 1", thread))

        async def history(thread: str) -> int:
            rows = await conn.fetch(f"{select} ORDER BY step", thread)
            return sum(1 for row in rows if orjson.loads(row[0]))

        async def fill(n: int) -> None:
            values = f"'', {_FILL_THREAD}, {_FILL_STEP}, '\\x7b7d'"
            await _admin(_fill_sql(table, "namespace, thread, step, payload", values, n))

        s.put, s.get_latest, s.history, s.fill = put, get_latest, history, fill
        yield s
    finally:
        await pool.close()
        await conn.close()


async def _interleaved(items: list[T], work: Callable[[T, int], Awaitable[Any]]) -> list[float]:
    """Median seconds of ``work(item, turn)`` per item over ROUNDS turns taken in rotation.

    The median, not the total: one burst of another tenant's disk traffic then
    costs one round, not the subject that happened to be running.
    """
    spent: list[list[float]] = [[] for _ in items]
    for turn in range(ROUNDS):
        for i, item in enumerate(items):
            start = time.perf_counter()
            await work(item, turn)
            spent[i].append(time.perf_counter() - start)
    return [median(rounds) for rounds in spent]


async def _measure(subjects: list[_Subject], sizes: _Sizes) -> list[list[Any]]:
    """Per subject: [seq puts/s, p50 at 2k, p50 at 1M or None, history s, writers puts/s]."""
    chunk = sizes.puts // ROUNDS

    async def sequential(s: _Subject, turn: int) -> None:
        for step in range(turn * chunk, (turn + 1) * chunk):
            await s.put("seq", step)

    async def writers(s: _Subject, turn: int) -> None:
        per = sizes.per_writer // ROUNDS

        async def writer(w: int) -> None:
            for step in range(turn * per, (turn + 1) * per):
                await s.put(f"w{w}", step)

        await asyncio.gather(*(writer(w) for w in range(sizes.writers)))

    async def p50s() -> list[float]:
        samples: dict[str, list[float]] = {s.label: [] for s in subjects}

        async def sample(s: _Subject, turn: int) -> None:
            calls = await time_calls(lambda: s.get_latest("seq"), sizes.gets // ROUNDS)
            samples[s.label].extend(calls)

        await _interleaved(subjects, sample)
        return [percentile(samples[s.label], 50) for s in subjects]

    async def history(s: _Subject, turn: int) -> None:
        assert await s.history("seq") == sizes.puts

    seq = await _interleaved(subjects, sequential)
    small = await p50s()
    full = await _interleaved(subjects, history)
    concurrent = await _interleaved(subjects, writers)
    big: list[float | None] = [None] * len(subjects)
    if sizes.big:
        for s in subjects:
            await s.fill(sizes.big - sizes.puts - sizes.writers * sizes.per_writer)
        big = list(await p50s())
    per_round = sizes.writers * (sizes.per_writer // ROUNDS)
    return [
        [chunk / seq[i], small[i], big[i], full[i], per_round / concurrent[i]]
        for i in range(len(subjects))
    ]


async def _payload_types(schema: str, sizes: _Sizes, blobs: list[bytes]) -> Table:
    """The same bytes into BYTEA (lz4, pglz) and JSONB: what decided the column type."""
    variants = {
        "BYTEA, lz4 (chosen)": "BYTEA COMPRESSION lz4",
        "BYTEA, pglz (server default)": "BYTEA COMPRESSION pglz",
        "JSONB": "JSONB",
    }
    conn = await asyncpg.connect(DSN)
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        format="binary",
        encoder=lambda blob: b"\x01" + blob,
        decoder=lambda data: data[1:],
    )
    names = [f'"{schema}"."payload_{i}"' for i in range(len(variants))]
    for name, column in zip(names, variants.values(), strict=True):
        await conn.execute(f"CREATE TABLE {name} (step BIGINT PRIMARY KEY, payload {column})")
    chunk = sizes.puts // ROUNDS

    async def puts(name: str, turn: int) -> None:
        for step in range(turn * chunk, (turn + 1) * chunk):
            await conn.execute(f"INSERT INTO {name} VALUES ($1, $2)", step, blobs[step])

    samples: dict[str, list[float]] = {name: [] for name in names}

    async def gets(name: str, turn: int) -> None:
        sql = f"SELECT payload FROM {name} ORDER BY step DESC LIMIT 1"

        async def get() -> None:
            orjson.loads(await conn.fetchval(sql))

        samples[name].extend(await time_calls(get, sizes.gets // ROUNDS))

    async def scan(name: str, turn: int) -> None:
        for row in await conn.fetch(f"SELECT payload FROM {name} ORDER BY step"):
            orjson.loads(row[0])

    try:
        put_s = await _interleaved(names, puts)
        await _interleaved(names, gets)
        scan_s = await _interleaved(names, scan)
        sizes_mb = [
            await conn.fetchval("SELECT pg_total_relation_size($1::regclass)", n) / 1e6
            for n in names
        ]
    finally:
        await conn.close()
    return Table(
        title="Payload column type (raw asyncpg, one connection, same bytes)",
        headers=["column", "puts/s (seq)", "get latest p50", "history (s)", "size on disk"],
        rows=[
            [
                label,
                rate(chunk, put_s[i]),
                ms(percentile(samples[names[i]], 50)),
                f"{scan_s[i]:.3f}",
                f"{sizes_mb[i]:.1f} MB",
            ]
            for i, label in enumerate(variants)
        ],
        notes=["JSONB also refuses strings holding \\u0000, which agent state may contain."],
    )


@asynccontextmanager
async def _schema(name: str) -> AsyncIterator[str]:
    await _admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE; CREATE SCHEMA "{name}"')
    try:
        yield name
    finally:
        await _admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _cells(name: str, m: list[Any]) -> list[str]:
    big = "skipped (--quick)" if m[2] is None else ms(m[2])
    return [name, rate(int(m[0]), 1.0), ms(m[1]), big, f"{m[3]:.3f}", rate(int(m[4]), 1.0)]


def _versus(name: str, ours: list[Any], other: list[Any], share: bool) -> list[str]:
    """Ratios where above 1x (or 100%) means agentflow is better."""
    cells = [name]
    for i, higher_is_better in enumerate((True, False, False, False, True)):
        if ours[i] is None or other[i] is None:
            cells.append("n/a")
        elif higher_is_better:
            cells.append(f"{ours[i] / other[i]:.0%}" if share else ratio(ours[i], other[i]))
        else:
            cells.append(ratio(other[i], ours[i]))
    return cells


async def run(quick: bool) -> list[Table]:
    sizes = _Sizes(quick)
    states = [nested_state(step) for step in range(max(sizes.puts, sizes.per_writer))]
    codec = JsonCodec()
    blobs = [
        codec.encode(
            Checkpoint(thread="seq", step=i, state=s, next=("n",)), RecordKey("", "seq", i)
        )
        for i, s in enumerate(states)
    ]
    async with _schema(f"bench_pg_{os.getpid()}") as schema:
        async with AsyncExitStack() as stack:
            subjects = [
                await stack.enter_async_context(_agentflow(schema, states)),
                await stack.enter_async_context(_langgraph(schema, states)),
                await stack.enter_async_context(_raw_floor(schema, blobs)),
            ]
            ours, theirs, floor = await _measure(subjects, sizes)
        payloads = await _payload_types(schema, sizes, blobs)
    table = Table(
        title=f"PostgreSQL, synchronous_commit=on, ~{len(blobs[0]) // 1000} KB state"
        + (" (quick)" if quick else ""),
        headers=_HEADERS,
        rows=[
            *(_cells(s.label, m) for s, m in zip(subjects, (ours, theirs, floor), strict=True)),
            _versus("agentflow vs LangGraph", ours, theirs, share=False),
            _versus("agentflow vs raw floor", ours, floor, share=True),
        ],
        notes=[
            f"{sizes.puts:,} sequential puts to one thread; get latest p50 of {sizes.gets} reads;"
            f" {sizes.writers} writers x {sizes.per_writer} puts, each on its own thread;"
            f" each figure is the median of {ROUNDS} interleaved rounds (p50s pool all reads).",
            "Ratios: above 1x (or 100% of the floor's throughput) means agentflow is better.",
            "The 1M column bulk-fills 996,000 rows over 996 other threads (tiny payloads);"
            " the measured thread keeps its 2,000 real states.",
        ],
    )
    return [table, payloads]
