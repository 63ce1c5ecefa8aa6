"""RedisCheckpointer against LangGraph's AsyncRedisSaver and the raw SET floor.

All rows use one local Redis at the same persistence settings (whatever the
server runs with; the table states them). The raw floor writes the very
payload bytes agentflow stores with one plain ``SET`` per checkpoint: one
round trip, no index, no revision, so no checkpointer on this server can be
faster. LangGraph's saver needs the RedisJSON and RediSearch modules; on a
plain Redis it fails at setup and its row says why.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis.asyncio as aioredis

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import encode
from agentflow.checkpoint.redaction import redact_none
from agentflow.checkpoint.redis import RedisCheckpointer
from benchmarks.common import (
    Table,
    median,
    ms,
    nested_state,
    percentile,
    rate,
    ratio,
    time_calls,
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
        #: agentflow and the floor alternate, so load on a shared machine hits both.
        self.rounds = 1 if quick else 3


def _checkpoint(thread: str, step: int, states: list[dict[str, Any]]) -> Checkpoint:
    return Checkpoint(thread=thread, step=step, state=states[step], next=("n",))


async def _measure(
    put: Callable[[str, int], Awaitable[Any]],
    get_latest: Callable[[str], Awaitable[Any]],
    history: Callable[[str], Awaitable[int]],
    sizes: _Sizes,
) -> list[float]:
    """[seq puts/s, get p50 s, get p95 s, history s, concurrent puts/s]."""
    start = time.perf_counter()
    for step in range(sizes.puts):
        await put("seq", step)
    seq = sizes.puts / (time.perf_counter() - start)
    gets = await time_calls(lambda: get_latest("seq"), sizes.gets)
    start = time.perf_counter()
    assert await history("seq") == sizes.puts
    full = time.perf_counter() - start

    async def writer(w: int) -> None:
        for step in range(sizes.per_writer):
            await put(f"w{w}", step)

    start = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(sizes.writers)))
    concurrent = sizes.writers * sizes.per_writer / (time.perf_counter() - start)
    return [seq, percentile(gets, 50), percentile(gets, 95), full, concurrent]


async def _agentflow(prefix: str, sizes: _Sizes, states: list[dict[str, Any]]) -> list[float]:
    async with RedisCheckpointer(URL, prefix=prefix) as cp:

        async def put(thread: str, step: int) -> None:
            await cp.put(_checkpoint(thread, step, states))

        async def history(thread: str) -> int:
            return sum([1 async for _ in cp.history(thread)])

        return await _measure(put, cp.get, history, sizes)


async def _raw_floor(
    client: aioredis.Redis, prefix: str, sizes: _Sizes, blobs: list[bytes]
) -> list[float]:
    def key(thread: str, step: int) -> str:
        return f"{prefix}:{thread}:{step}"

    async def put(thread: str, step: int) -> None:
        await client.set(key(thread, step), blobs[step])

    async def get_latest(thread: str) -> Any:
        return orjson.loads(await client.get(key(thread, sizes.puts - 1)))

    async def history(thread: str) -> int:
        count = 0
        for first in range(0, sizes.puts, _BATCH):
            keys = [key(thread, s) for s in range(first, min(first + _BATCH, sizes.puts))]
            count += sum(1 for blob in await client.mget(keys) if orjson.loads(blob))
        return count

    return await _measure(put, get_latest, history, sizes)


async def _langgraph(prefix: str, sizes: _Sizes, states: list[dict[str, Any]]) -> list[float]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.redis.aio import AsyncRedisSaver

    async with AsyncRedisSaver.from_conn_string(
        URL, checkpoint_prefix=f"{prefix}:cp", checkpoint_write_prefix=f"{prefix}:w"
    ) as saver:
        await saver.asetup()
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
            return await saver.aget_tuple({"configurable": {"thread_id": thread}})

        async def history(thread: str) -> int:
            config = {"configurable": {"thread_id": thread}}
            return sum([1 async for _ in saver.alist(config)])  # type: ignore[arg-type]

        return await _measure(put, get_latest, history, sizes)


def _row(name: str, m: list[float]) -> list[str]:
    return [name, rate(int(m[0]), 1.0), ms(m[1]), ms(m[2]), f"{m[3]:.3f}", rate(int(m[4]), 1.0)]


async def _persistence(client: aioredis.Redis) -> str:
    save = (await client.config_get("save")).get("save", "")
    aof = (await client.config_get("appendonly")).get("appendonly", "")
    fsync = (await client.config_get("appendfsync")).get("appendfsync", "")
    return f'save "{save}", appendonly {aof}, appendfsync {fsync}'


async def run(quick: bool) -> list[Table]:
    sizes = _Sizes(quick)
    count = max(sizes.puts, sizes.per_writer)
    states = [nested_state(step) for step in range(count)]
    blobs = [encode(_checkpoint("seq", s, states), redact_none).payload for s in range(count)]
    prefix = f"bench-redis-{uuid.uuid4().hex}"
    client = aioredis.Redis.from_url(URL, decode_responses=True)
    raw = aioredis.Redis.from_url(URL)
    rounds: dict[str, list[list[float]]] = {"ours": [], "floor": []}
    try:
        persistence = await _persistence(client)
        for r in range(sizes.rounds):
            rounds["ours"].append(await _agentflow(f"{prefix}:af{r}", sizes, states))
            rounds["floor"].append(await _raw_floor(raw, f"{prefix}:raw{r}", sizes, blobs))
        try:
            theirs: list[float] | str = await _langgraph(f"{prefix}:lg", sizes, states)
        except Exception as exc:  # the row reports why it cannot run
            reason = str(exc).split(": ", 1)[-1].split(", with args")[0]
            theirs = f"cannot run on plain Redis ({type(exc).__name__}: {reason})"
    finally:
        async for key in client.scan_iter(match=f"{prefix}:*", count=1_000):
            await client.unlink(key)
        await client.aclose()
        await raw.aclose()
    ours, floor = (
        [median([m[i] for m in rounds[name]]) for i in range(len(_HEADERS) - 1)]
        for name in ("ours", "floor")
    )
    table = Table(
        title=f"Redis, ~{len(blobs[0]) // 1000} KB state" + (" (quick)" if quick else ""),
        headers=_HEADERS,
        rows=[_row("agentflow RedisCheckpointer", ours), _row("raw redis-py SET floor", floor)],
    )
    if isinstance(theirs, str):
        table.rows.append(["LangGraph AsyncRedisSaver", theirs, "", "", "", ""])
    else:
        table.rows.append(_row("LangGraph AsyncRedisSaver", theirs))
        table.rows.append(
            [
                "agentflow vs LangGraph",
                ratio(ours[0], theirs[0]),
                ratio(theirs[1], ours[1]),
                ratio(theirs[2], ours[2]),
                ratio(theirs[3], ours[3]),
                ratio(ours[4], theirs[4]),
            ]
        )
    table.rows.append(
        [
            "agentflow vs raw floor",
            f"{ours[0] / floor[0]:.0%}",
            ratio(floor[1], ours[1]),
            ratio(floor[2], ours[2]),
            ratio(floor[3], ours[3]),
            f"{ours[4] / floor[4]:.0%}",
        ]
    )
    table.notes += [
        f"Server persistence for every row: {persistence}.",
        f"Medians of {sizes.rounds} alternating rounds of agentflow and the floor.",
        f"{sizes.puts:,} sequential puts on one thread; get latest over {sizes.gets} calls; "
        f"history = all {sizes.puts:,} checkpoints; concurrent = "
        f"{sizes.writers} writers x {sizes.per_writer} puts.",
        "Targets: seq puts >= 3x LangGraph (its 764/s anchor; >= 2,500/s where it cannot run) "
        "and >= 60% of the raw SET floor.",
        "Ratios read 'higher is better for agentflow' (times are other/agentflow).",
        "2 shared vCPUs: figures are noisy; rerun for a median.",
    ]
    return [table]
