"""One LangGraph graph on LangGraph's own savers and on AgentflowSaver, per database.

The graph is a 10-node chain (no LLM) whose every node replaces a ~10 KB
nested state, run with LangGraph's default durability ("async"). On each
database the stock saver and ``AgentflowSaver`` over agentflow's backend write
into the same server (SQLite: two files in one folder; PostgreSQL: two schemas
of one database; MongoDB: two databases of one mongod) at equal durability,
and every measurement runs in interleaved blocks, so load on this shared box
hits both alike.

- steps/s: graph steps (one checkpoint and one pending write each) per second
  over fresh threads; the ratio is the median of the ratios of adjacent
  blocks, so a burst of load from other processes that hits one block does
  not decide it;
- get_state p50: ``graph.aget_state`` of a finished thread;
- get_state_history: listing 1,000 snapshots of a 1,001-checkpoint thread;
- bytes/step: what the store holds afterwards (files after a WAL checkpoint,
  ``pg_total_relation_size``, MongoDB ``storageSize`` + index size) divided
  by the checkpoints written.

On MongoDB both savers run at both acknowledgements: w:1 without the journal
wait (``MongoDBSaver``'s client default, agentflow's ``journal=False``) and
``j: true`` (each write waits for the journal: agentflow's default, a
``journal=true`` client for ``MongoDBSaver``). Each agentflow row is compared
with the stock saver at the same acknowledgement, and the cost of ``j: true``
is agentflow's journaled steps/s over its unjournaled ones. The contestants'
order rotates from block to block.

``AGENTFLOW_BENCH_STORES=MongoDB`` (comma-separated: SQLite, PostgreSQL,
MongoDB) measures those stores only.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypedDict

from benchmarks.common import Table, median, ms, nested_state, percentile, ratio

NODES = 10
DSN = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


class _State(TypedDict, total=False):
    step: int
    doc: dict[str, Any]


_DOCS = [nested_state(i) for i in range(NODES + 1)]


def _graph(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    def node(state: _State) -> _State:
        step = state.get("step", 0) + 1
        return {"step": step, "doc": _DOCS[step % len(_DOCS)]}

    builder = StateGraph(_State)
    names = [f"n{i}" for i in range(NODES)]
    for name in names:
        builder.add_node(name, node)
    builder.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        builder.add_edge(a, b)
    builder.add_edge(names[-1], END)
    return builder.compile(checkpointer=saver)


@dataclass
class _Contestant:
    label: str
    graph: Any
    storage: Callable[[], Awaitable[int]]
    checkpoints: int = 0
    seconds: float = 0.0
    #: steps/s of each block, paired with the other contestants' blocks.
    blocks: list[float] = field(default_factory=list)
    threads: int = 0

    async def runs(self, count: int) -> None:
        start = time.perf_counter()
        for _ in range(count):
            self.threads += 1
            config = {"configurable": {"thread_id": f"{self.label}-{self.threads}"}}
            await self.graph.ainvoke({"step": 0, "doc": _DOCS[0]}, config)
        elapsed = time.perf_counter() - start
        self.seconds += elapsed
        self.blocks.append(count * NODES / elapsed)
        self.checkpoints += count * (NODES + 1)

    async def get_state(self, thread: int) -> float:
        config = {"configurable": {"thread_id": f"{self.label}-{thread}"}}
        start = time.perf_counter()
        await self.graph.aget_state(config)
        return time.perf_counter() - start

    async def fill_history(self, thread: str, checkpoints: int) -> None:
        config = {"configurable": {"thread_id": thread}}
        for _ in range(-(-checkpoints // (NODES + 1))):
            await self.graph.ainvoke({"step": 0, "doc": _DOCS[0]}, config)
            self.checkpoints += NODES + 1

    async def history(self, thread: str, limit: int) -> float:
        config = {"configurable": {"thread_id": thread}}
        start = time.perf_counter()
        listed = [s async for s in self.graph.aget_state_history(config, limit=limit)]
        assert len(listed) == limit
        return time.perf_counter() - start


@dataclass
class _Sizes:
    blocks: int
    runs: int
    gets: int
    history: int
    history_rounds: int

    @classmethod
    def of(cls, quick: bool) -> _Sizes:
        return cls(3, 3, 30, 100, 2) if quick else cls(24, 4, 300, 1_000, 5)


#: A table's ratio rows: (label, ours, theirs), indexes into its contestants.
Comparisons = list[tuple[str, int, int]]
#: The ratio row of a database with one stock saver and one AgentflowSaver.
_STOCK: Final = [("AgentflowSaver / stock", 1, 0)]
#: MongoDB's: each acknowledgement against the same, and the cost of the journal wait.
_MONGODB: Final = [
    ("agentflow / stock, both w:1", 1, 0),
    ("agentflow / stock, both j:true", 3, 2),
    ("j:true cost: agentflow j:true / agentflow w:1", 3, 1),
]


async def _measure(
    name: str, contestants: list[_Contestant], comparisons: Comparisons, sizes: _Sizes
) -> Table:
    for block in range(sizes.blocks):
        for contestant in _rotated(contestants, block):
            await contestant.runs(sizes.runs)
    gets: dict[str, list[float]] = {c.label: [] for c in contestants}
    for i in range(sizes.gets):
        for contestant in _rotated(contestants, i):
            gets[contestant.label].append(await contestant.get_state(1 + i % contestant.threads))
    for contestant in contestants:
        await contestant.fill_history("long", sizes.history + 1)
    listing: dict[str, list[float]] = {c.label: [] for c in contestants}
    for i in range(sizes.history_rounds):
        for contestant in _rotated(contestants, i):
            listing[contestant.label].append(await contestant.history("long", sizes.history))
    rows = []
    for contestant in contestants:
        steps = contestant.threads * NODES / contestant.seconds
        per_step = await contestant.storage() / contestant.checkpoints
        rows.append(
            (
                steps,
                percentile(gets[contestant.label], 50),
                median(listing[contestant.label]),
                per_step,
            )
        )
    table = Table(
        title=f"LangGraph graph on {name}: the stock saver vs AgentflowSaver",
        headers=[
            "saver",
            "steps/s",
            "get_state p50",
            f"get_state_history {sizes.history:,}",
            "bytes/step",
        ],
    )
    for contestant, (steps, get, listed, per_step) in zip(contestants, rows, strict=True):
        table.rows.append(
            [contestant.label, f"{steps:,.0f}", ms(get), ms(listed), f"{per_step:,.0f}"]
        )
    for label, ours, theirs in comparisons:
        _, get, listed, per_step = rows[ours]
        _, their_get, their_list, their_bytes = rows[theirs]
        paired = zip(contestants[ours].blocks, contestants[theirs].blocks, strict=True)
        block_ratios = [mine / other for mine, other in paired]
        table.rows.append(
            [
                label,
                f"{median(block_ratios):.2f}x",
                ratio(their_get, get) + " faster",
                ratio(their_list, listed) + " faster",
                ratio(per_step, their_bytes),
            ]
        )
    table.notes.append(
        f"{sizes.blocks} interleaved blocks of {sizes.runs} runs x {NODES} steps each, the "
        f"contestants' order rotating per block; {sizes.gets} get_state samples; history "
        f"median of {sizes.history_rounds}; a ratio row's steps/s is the median of the "
        "per-block ratios (robust to load bursts)"
    )
    return table


def _rotated(contestants: list[_Contestant], shift: int) -> list[_Contestant]:
    shift %= len(contestants)
    return contestants[shift:] + contestants[:shift]


def _sqlite_bytes(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


@contextlib.asynccontextmanager
async def _sqlite(tmp: str) -> AsyncIterator[list[_Contestant]]:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from agentflow.checkpoint.sqlite import SqliteCheckpointer
    from agentflow.integrations.langgraph import AgentflowSaver

    theirs, ours = Path(tmp, "langgraph.db"), Path(tmp, "agentflow.db")
    async with (
        aiosqlite.connect(theirs) as conn,
        SqliteCheckpointer(ours, synchronous="FULL") as cp,
    ):
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=FULL")
        saver = AsyncSqliteSaver(conn)
        await saver.setup()

        async def their_bytes() -> int:
            await conn.commit()
            return _sqlite_bytes(theirs)

        async def our_bytes() -> int:
            return _sqlite_bytes(ours)

        yield [
            _Contestant("AsyncSqliteSaver (WAL, FULL)", _graph(saver), their_bytes),
            _Contestant(
                "AgentflowSaver(SqliteCheckpointer, FULL)", _graph(AgentflowSaver(cp)), our_bytes
            ),
        ]


async def _schema_bytes(schema: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(DSN)
    try:
        size: int = await conn.fetchval(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = $1 AND c.relkind = 'r'",
            schema,
        )
        return size
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def _postgres() -> AsyncIterator[list[_Contestant]]:
    import asyncpg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from agentflow.checkpoint.postgres import PostgresCheckpointer
    from agentflow.integrations.langgraph import AgentflowSaver

    tag = uuid.uuid4().hex[:8]
    theirs, ours = f"bench_lg_{tag}", f"bench_af_{tag}"
    admin = await asyncpg.connect(DSN)
    try:
        await admin.execute(f'CREATE SCHEMA "{theirs}"; CREATE SCHEMA "{ours}"')
        dsn = f"{DSN}?options=-csearch_path%3D{theirs}"
        async with (
            AsyncPostgresSaver.from_conn_string(dsn) as saver,
            PostgresCheckpointer(DSN, table="lg", schema=ours) as cp,
        ):
            await saver.setup()
            yield [
                _Contestant(
                    "AsyncPostgresSaver (1 conn)", _graph(saver), lambda: _schema_bytes(theirs)
                ),
                _Contestant(
                    "AgentflowSaver(PostgresCheckpointer)",
                    _graph(AgentflowSaver(cp)),
                    lambda: _schema_bytes(ours),
                ),
            ]
    finally:
        await admin.execute(
            f'DROP SCHEMA IF EXISTS "{theirs}" CASCADE; DROP SCHEMA IF EXISTS "{ours}" CASCADE'
        )
        await admin.close()


@contextlib.asynccontextmanager
async def _mongodb() -> AsyncIterator[list[_Contestant]]:
    from langgraph.checkpoint.mongodb import MongoDBSaver
    from pymongo import AsyncMongoClient, MongoClient
    from tests.support.mongod import mongodb_uri

    from agentflow.checkpoint.mongodb import MongoCheckpointer
    from agentflow.integrations.langgraph import AgentflowSaver

    uri = mongodb_uri()
    tag = uuid.uuid4().hex[:8]
    names = [f"bench_{kind}_{tag}" for kind in ("lg", "lgj", "af", "afj")]
    theirs, theirs_journaled, ours, ours_journaled = names
    sync_client: MongoClient[Any] = MongoClient(uri)
    sync_journaled: MongoClient[Any] = MongoClient(uri, journal=True)
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri)

    async def database_bytes(name: str) -> int:
        await client.admin.command("fsync")  # storageSize counts only what a checkpoint wrote
        stats = await client[name].command("dbStats")
        return int(stats["storageSize"] + stats["indexSize"])

    def stock(label: str, saver_client: MongoClient[Any], name: str) -> _Contestant:
        saver = MongoDBSaver(saver_client, db_name=name)
        return _Contestant(label, _graph(saver), lambda: database_bytes(name))

    def agentflow(label: str, cp: MongoCheckpointer, name: str) -> _Contestant:
        return _Contestant(label, _graph(AgentflowSaver(cp)), lambda: database_bytes(name))

    try:
        async with (
            MongoCheckpointer(client=client, database=ours, journal=False) as unjournaled,
            MongoCheckpointer(client=client, database=ours_journaled) as journaled,
        ):
            yield [
                stock("MongoDBSaver (w:1)", sync_client, theirs),
                agentflow(
                    "AgentflowSaver(MongoCheckpointer, journal=False: w:1)", unjournaled, ours
                ),
                stock("MongoDBSaver (w:1, j:true)", sync_journaled, theirs_journaled),
                agentflow(
                    "AgentflowSaver(MongoCheckpointer, default: w:1, j:true)",
                    journaled,
                    ours_journaled,
                ),
            ]
    finally:
        for name in names:
            await client.drop_database(name)
        await client.close()
        sync_client.close()
        sync_journaled.close()


#: ``AGENTFLOW_BENCH_STORES=MongoDB`` (comma-separated) measures those stores only.
_ONLY = os.environ.get("AGENTFLOW_BENCH_STORES")


async def run(quick: bool) -> list[Table]:
    sizes = _Sizes.of(quick)
    tables = []
    with tempfile.TemporaryDirectory(prefix="bench-langgraph-") as tmp:
        races: dict[str, tuple[Callable[[], Any], Comparisons]] = {
            "SQLite": (lambda: _sqlite(tmp), _STOCK),
            "PostgreSQL": (_postgres, _STOCK),
            "MongoDB": (_mongodb, _MONGODB),
        }
        names = list(races) if _ONLY is None else [name.strip() for name in _ONLY.split(",")]
        if unknown := set(names) - set(races):
            raise SystemExit(
                f"AGENTFLOW_BENCH_STORES: unknown {sorted(unknown)}, known {list(races)}"
            )
        for name in names:
            race, comparisons = races[name]
            async with race() as contestants:
                tables.append(await _measure(name, contestants, comparisons, sizes))
    return tables
