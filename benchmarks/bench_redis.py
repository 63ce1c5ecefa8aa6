"""RedisCheckpointer against LangGraph's AsyncRedisSaver and the raw SET floor.

All rows use one local Redis at the same persistence settings (the table
states them). The raw floor writes the very payload bytes agentflow stores
with one plain ``SET`` per checkpoint: one round trip, no index, no revision,
so no checkpointer on this server can be faster. LangGraph's saver needs the
RedisJSON and RediSearch modules; on a plain Redis it fails at setup and its
row says why.

The machine is shared, so load swings within seconds. The rows are therefore
measured in lockstep: each sequential put and each get is taken from every
checkpointer in turn, and the history and concurrent phases alternate, so a
swing hits every row alike and the ratios stay meaningful.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import orjson
import redis.asyncio as aioredis

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.redis import RedisCheckpointer
from benchmarks.bench_due import fill_waiting, list_due_pass, page_all_pass
from benchmarks.common import (
    LangGraphWriter,
    Table,
    median,
    ms,
    nested_state,
    percentile,
    rate,
    ratio,
)

URL = "redis://127.0.0.1:6379/0"
_HEADERS = [
    "checkpointer",
    "puts/s (seq)",
    "get latest p50",
    "get latest p95",
    "history (s)",
    "concurrent puts/s",
]
_BATCH = 128


class _Sizes:
    def __init__(self, quick: bool) -> None:
        self.puts = 200 if quick else 2_000
        self.gets = 100 if quick else 500
        self.writers = 8
        self.per_writer = 25 if quick else 250


@dataclass
class _Saver:
    put: Callable[[str, int], Awaitable[Any]]
    get_latest: Callable[[str], Awaitable[Any]]
    history: Callable[[str], Awaitable[int]]


def _checkpoint(thread: str, step: int, states: list[dict[str, Any]]) -> Checkpoint:
    return Checkpoint(thread=thread, step=step, state=states[step], next=("n",))


@asynccontextmanager
async def _agentflow(prefix: str, states: list[dict[str, Any]]) -> AsyncIterator[_Saver]:
    async with RedisCheckpointer(URL, prefix=prefix) as cp:

        async def put(thread: str, step: int) -> None:
            await cp.put(_checkpoint(thread, step, states))

        async def history(thread: str) -> int:
            return sum([1 async for _ in cp.history(thread)])

        yield _Saver(put, cp.get, history)


@asynccontextmanager
async def _raw_floor(prefix: str, blobs: list[bytes]) -> AsyncIterator[_Saver]:
    client = aioredis.Redis.from_url(URL)
    latest: dict[str, int] = {}

    def key(thread: str, step: int) -> str:
        return f"{prefix}:{thread}:{step}"

    async def put(thread: str, step: int) -> None:
        await client.set(key(thread, step), blobs[step])
        latest[thread] = step

    async def get_latest(thread: str) -> Any:
        return orjson.loads(cast(bytes, await client.get(key(thread, latest[thread]))))

    async def history(thread: str) -> int:
        count = 0
        for first in range(0, latest[thread] + 1, _BATCH):
            keys = [key(thread, s) for s in range(first, min(first + _BATCH, latest[thread] + 1))]
            stored = cast(list[bytes], await client.mget(keys))
            count += sum(1 for blob in stored if orjson.loads(blob))
        return count

    try:
        yield _Saver(put, get_latest, history)
    finally:
        await client.aclose()


@asynccontextmanager
async def _langgraph(prefix: str, states: list[dict[str, Any]]) -> AsyncIterator[_Saver]:
    from langgraph.checkpoint.redis.aio import AsyncRedisSaver

    async with AsyncRedisSaver.from_conn_string(
        URL, checkpoint_prefix=f"{prefix}:cp", checkpoint_write_prefix=f"{prefix}:w"
    ) as saver:
        await saver.asetup()
        put = LangGraphWriter(saver, states).put

        async def get_latest(thread: str) -> Any:
            return await saver.aget_tuple({"configurable": {"thread_id": thread}})

        async def history(thread: str) -> int:
            config = {"configurable": {"thread_id": thread}}
            found = [1 async for _ in saver.alist(config)]  # type: ignore[arg-type,unused-ignore]
            return len(found)

        yield _Saver(put, get_latest, history)


async def _lockstep(savers: dict[str, _Saver], sizes: _Sizes) -> dict[str, list[float]]:
    """Per saver: [seq puts/s, get p50 s, get p95 s, history s, concurrent puts/s]."""
    clock = time.perf_counter
    put_time = dict.fromkeys(savers, 0.0)
    for step in range(sizes.puts):
        for name, saver in savers.items():
            start = clock()
            await saver.put("seq", step)
            put_time[name] += clock() - start
    gets: dict[str, list[float]] = {name: [] for name in savers}
    for _ in range(sizes.gets):
        for name, saver in savers.items():
            start = clock()
            await saver.get_latest("seq")
            gets[name].append(clock() - start)
    results = {}
    for name, saver in savers.items():
        start = clock()
        assert await saver.history("seq") == sizes.puts, name
        full = clock() - start

        async def writer(w: int, saver: _Saver = saver) -> None:
            for step in range(sizes.per_writer):
                await saver.put(f"w{w}", step)

        start = clock()
        await asyncio.gather(*(writer(w) for w in range(sizes.writers)))
        concurrent = sizes.writers * sizes.per_writer / (clock() - start)
        samples = gets[name]
        results[name] = [
            sizes.puts / put_time[name],
            percentile(samples, 50),
            percentile(samples, 95),
            full,
            concurrent,
        ]
    return results


def _row(name: str, m: list[float]) -> list[str]:
    return [name, rate(int(m[0]), 1.0), ms(m[1]), ms(m[2]), f"{m[3]:.3f}", rate(int(m[4]), 1.0)]


def _versus(name: str, ours: list[float], other: list[float]) -> list[str]:
    return [
        name,
        f"{ours[0] / other[0]:.0%}",
        ratio(other[1], ours[1]),
        ratio(other[2], ours[2]),
        ratio(other[3], ours[3]),
        f"{ours[4] / other[4]:.0%}",
    ]


async def _persistence() -> str:
    client = aioredis.Redis.from_url(URL, decode_responses=True)
    try:
        config = await client.config_get("*")
    finally:
        await client.aclose()
    return (
        f'save "{config.get("save", "")}", appendonly {config.get("appendonly")}, '
        f"appendfsync {config.get('appendfsync')}"
    )


async def _drop(prefix: str) -> None:
    admin = aioredis.Redis.from_url(URL)
    try:
        async for key in admin.scan_iter(match=f"{prefix}:*", count=1_000):
            await admin.unlink(key)
    finally:
        await admin.aclose()


async def _due(quick: bool) -> Table:
    """list_due against paging every thread (the passes of bench_due, on Redis)."""
    suspended, due, rounds = (10_000, 100, 3) if quick else (100_000, 1_000, 5)
    prefix = f"bench-redis-due-{uuid.uuid4().hex}"
    passes: dict[str, list[float]] = {"due": [], "scan": []}
    read = {"due": 0, "scan": 0}
    try:
        async with RedisCheckpointer(URL, prefix=prefix) as cp:
            start = time.perf_counter()
            await fill_waiting(cp, suspended, due)
            fill_s = time.perf_counter() - start
            for _ in range(rounds):  # interleaved, so load swings hit both alike
                for name, one_pass in (("due", list_due_pass), ("scan", page_all_pass)):
                    start = time.perf_counter()
                    found, read[name] = await one_pass(cp)
                    passes[name].append(time.perf_counter() - start)
                    assert found == due, (name, found, due)
    finally:
        await _drop(prefix)
    due_s, scan_s = median(passes["due"]), median(passes["scan"])
    return Table(
        title=f"Redis list_due: {due:,} due timers among {suspended:,} waiting threads",
        headers=["pass", "time", "rows read", "vs list_due"],
        rows=[
            ["list_due", ms(due_s), f"{read['due']:,} ({read['due'] / due:.2f}x due)", "1x"],
            ["page every thread", ms(scan_s), f"{read['scan']:,}", f"{scan_s / due_s:.0f}x"],
        ],
        notes=[
            f"{suspended:,} threads waiting on a timer plus {suspended:,} waiting for a human; "
            f"medians of {rounds} interleaved passes; fill took {fill_s:.0f} s.",
            "rows read = summaries returned to the caller, the peek row of each page included.",
        ],
    )


async def run(quick: bool) -> list[Table]:
    sizes = _Sizes(quick)
    count = max(sizes.puts, sizes.per_writer)
    states = [nested_state(step) for step in range(count)]
    codec = JsonCodec()
    blobs = [
        codec.encode(_checkpoint("seq", s, states), RecordKey("", "seq", s)) for s in range(count)
    ]
    prefix = f"bench-redis-{uuid.uuid4().hex}"
    names = {"ours": "agentflow RedisCheckpointer", "floor": "raw redis-py SET floor"}
    langgraph_error = ""
    try:
        async with AsyncExitStack() as stack:
            savers = {
                "ours": await stack.enter_async_context(_agentflow(f"{prefix}:af", states)),
                "floor": await stack.enter_async_context(_raw_floor(f"{prefix}:raw", blobs)),
            }
            try:
                savers["langgraph"] = await stack.enter_async_context(
                    _langgraph(f"{prefix}:lg", states)
                )
            except Exception as exc:  # the row reports why it cannot run
                reason = str(exc).split(": ", 1)[-1].split(", with args")[0]
                langgraph_error = f"cannot run on plain Redis ({type(exc).__name__}: {reason})"
            results = await _lockstep(savers, sizes)
    finally:
        await _drop(prefix)
    ours = results["ours"]
    table = Table(
        title=f"Redis, ~{len(blobs[0]) // 1000} KB state" + (" (quick)" if quick else ""),
        headers=_HEADERS,
        rows=[_row(names[name], m) for name, m in results.items() if name in names],
    )
    if "langgraph" in results:
        table.rows.append(_row("LangGraph AsyncRedisSaver", results["langgraph"]))
        table.rows.append(_versus("agentflow vs LangGraph", ours, results["langgraph"]))
    else:
        table.rows.append(["LangGraph AsyncRedisSaver", langgraph_error, "", "", "", ""])
    table.rows.append(_versus("agentflow vs raw floor", ours, results["floor"]))
    table.notes += [
        f"Server persistence for every row: {await _persistence()}.",
        f"{sizes.puts:,} sequential puts on one thread and get latest over {sizes.gets} calls, "
        f"in lockstep across rows; history = all {sizes.puts:,} checkpoints; concurrent = "
        f"{sizes.writers} writers x {sizes.per_writer} puts.",
        "Targets: seq puts >= 3x LangGraph (its 764/s anchor; >= 2,500/s where it cannot run) "
        "and >= 60% of the raw SET floor.",
        "Ratios read 'higher is better for agentflow' (times are other/agentflow).",
        "2 shared vCPUs: figures are noisy; rerun for a median.",
    ]
    return [table, await _due(quick)]
