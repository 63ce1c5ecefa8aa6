"""The layout version of a namespace, and bringing older layouts onto it.

``P:{n...}:v`` holds the version of everything in a namespace: its threads,
records and events (layout 3). Before it, the checkpoints kept ``2`` there
and the durable stores ``1`` in ``P:{d...}:v``; layout 1 of the checkpoints
had no version key at all. A store brings its namespace over before its first
call (:func:`prepare`), in steps that each skip what is already done, so
several processes may migrate at once and new writers may run meanwhile
(stop writers of older releases first: they do not keep the new indexes):

* layout 1 -> 2: each thread's summary moves from its own key (``...:h``,
  plain ThreadInfo JSON) into ``sum`` with the status letter and wake instant
  the scripts index, worked out here (Lua cannot parse ISO-8601 offsets).
  Step metadata keeps the layout-1 summary until the step is rewritten; a
  prune that makes such a step the latest has it worked out by
  :func:`upgrade_summary`.
* layout 2 + durable 1 -> 3: a thread whose record is waiting for
  reconciliation or failed gets that status in ``rs`` and ``st`` (records
  are paged by the record status index: only those runs are read), and each
  event of a child run names its parent index (``<seq>p``), found with one
  ``SCAN`` of the namespace's parent indexes (only where events were ever
  appended), so a delete can take the event out of it.

Then both version keys get ``3``: the old durable one too, so that a durable
store of an older release refuses the namespace instead of writing records
without the thread statuses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

import orjson
import redis.asyncio as aioredis

from agentflow.checkpoint.base import ThreadInfo
from agentflow.checkpoint.redis.keys import IMPOSED, LAYOUT, Keys, run_range
from agentflow.checkpoint.redis.records import summary
from agentflow.checkpoint.redis.scripts import LUA_COMMON, LUA_THREADS, bind
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import AgentflowError, CheckpointCorrupted, IncompatibleSchema, StoreNotFound

__all__ = ["prepare", "upgrade_summary"]

#: Threads or records moved per script.
_PAGE: Final = 256
_NAMESPACE: Final = "IDX EXP SUM ST DUE RS"

# KEYS the namespace's, then the layout-1 summary key of each thread; ARGV
# thread, its new summary, the layout-1 summary it was worked out from, for
# each thread in turn.
_LUA_SUMMARIES: Final = (
    bind(_NAMESPACE)
    + LUA_COMMON
    + LUA_THREADS
    + """
expect('zset', {IDX, ST, DUE})
expect('hash', {SUM, RS})
for i = 7, #KEYS do
  local thread, new, seen = ARGV[3 * i - 20], ARGV[3 * i - 19], ARGV[3 * i - 18]
  if redis.call('HEXISTS', SUM, thread) == 0 and redis.call('ZSCORE', IDX, thread)
      and redis.call('GET', KEYS[i]) == seen then
    resummarize(thread, false, new)
  end
  redis.call('UNLINK', KEYS[i])
end
"""
)

# KEYS the namespace's, then the record of each key; ARGV those keys. Sets the
# status each record imposes now (it may have moved since it was listed).
_LUA_IMPOSE: Final = (
    bind(_NAMESPACE)
    + LUA_COMMON
    + LUA_THREADS
    + """
local plans = {}
for i = 7, #KEYS do
  local status = redis.call('HGET', KEYS[i], 'status')
  plans[i] = plan_impose(ARGV[i - 6], status and IMPOSED[status] or false)
end
for i = 7, #KEYS do apply_impose(ARGV[i - 6], plans[i]) end
"""
)

# KEYS ev, a parent index. Names the index in each of its events that lacks it.
_LUA_PARENTS: Final = (
    bind("EV PARENT")
    + LUA_COMMON
    + """
expect('hash', {EV})
for _, seq in ipairs(redis.call('ZRANGE', PARENT, 0, -1)) do
  if redis.call('HEXISTS', EV, seq .. 'm') == 1 then redis.call('HSET', EV, seq .. 'p', PARENT) end
end
"""
)


def upgrade_summary(legacy: bytes) -> bytes:
    """The layout-2 summary of a layout-1 one (plain ThreadInfo JSON)."""
    try:
        fields = orjson.loads(legacy)
        info = ThreadInfo("", **fields)
        wake_us = None if info.wake_at is None else parse_instant(info.wake_at)
        return summary(info.status, wake_us, legacy)
    except (TypeError, ValueError, AgentflowError) as exc:
        raise CheckpointCorrupted("a thread summary of layout 1 is damaged") from exc


def _number(value: object, what: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bytes) and value.isdigit() and len(value) < 10:
        return int(value)
    raise CheckpointCorrupted(f"{where} holds an invalid {what} layout version {value!r}")


async def _paged(
    read: Callable[[bytes], Awaitable[list[bytes]]], move: Callable[[list[bytes]], Awaitable[Any]]
) -> None:
    """``move`` every page that ``read(after)`` returns, from the first on."""
    start = b""
    while True:
        page = await read(start)
        if page:
            await move(page)
        if len(page) < _PAGE:
            return
        start = page[-1]


async def _summaries(client: aioredis.Redis, keys: Keys) -> None:
    """Layout 1 -> 2 (see the module docstring)."""
    script = client.register_script(_LUA_SUMMARIES)

    async def read(after: bytes) -> list[bytes]:
        start = b"(" + after if after else b"-"
        found = await client.zrange(keys.threads[0], start, b"+", bylex=True, offset=0, num=_PAGE)
        return cast(list[bytes], found)

    async def move(names: list[bytes]) -> None:
        legacy = [keys.thread(name.decode())[0][:-1] + b"h" for name in names]
        values = cast(list[bytes | None], await client.mget(legacy))
        moved, args = [], []
        for name, key, value in zip(names, legacy, values, strict=True):
            if value is not None:
                moved.append(key)
                args += [name, upgrade_summary(value), value]
        if moved:
            await script(keys=[*keys.threads, *moved], args=args)

    await _paged(read, move)


async def _records(client: aioredis.Redis, keys: Keys) -> None:
    """Durable 1 -> 3: the statuses records impose, and the events' parent indexes."""
    script = client.register_script(_LUA_IMPOSE)
    for status in IMPOSED:

        async def read(after: bytes, status: Any = status) -> list[bytes]:
            start, stop, _ = run_range(status, after.decode() if after else None)
            members = await client.zrange(
                keys.runs[1], start, stop, bylex=True, offset=0, num=_PAGE
            )
            return [member[1:] for member in cast(list[bytes], members)]

        async def move(page: list[bytes]) -> None:
            runs = [keys.run(key.decode()) for key in page]
            await script(keys=[*keys.threads, *runs], args=page)

        await _paged(read, move)
    if await client.exists(keys.events[0]):
        parents = client.register_script(_LUA_PARENTS)
        async for index in client.scan_iter(match=keys.parent_pattern, count=1_000):
            await parents(keys=[keys.events[2], index])


async def prepare(client: aioredis.Redis, keys: Keys, namespace: str, *, create: bool) -> int:
    """Bring the namespace onto :data:`LAYOUT` unless it is there: refuse a newer or
    damaged version, migrate an older layout, start an empty namespace (unless not
    ``create``: then :class:`~agentflow.errors.StoreNotFound`, and nothing is
    written). Returns the largest payload the server takes (``proto-max-bulk-len``;
    512 MB where ``CONFIG`` is refused). One round trip when the namespace is there."""
    async with client.pipeline(transaction=False) as pipe:
        pipe.get(keys.version)
        pipe.get(keys.runs[2])
        pipe.config_get("proto-max-bulk-len")
        version, fence, config = await pipe.execute(raise_on_error=False)
    for reply in (version, fence):
        if isinstance(reply, Exception):
            raise reply
    if version != LAYOUT:
        await _migrate(client, keys, namespace, version, fence, create=create)
    limit = str(config.get("proto-max-bulk-len")) if isinstance(config, dict) else ""
    return int(limit) if limit.isdigit() else 512 * 1024 * 1024


async def _migrate(
    client: aioredis.Redis,
    keys: Keys,
    namespace: str,
    version: object,
    fence: object,
    *,
    create: bool,
) -> None:
    where = f"{'namespace ' + repr(namespace) if namespace else 'the default namespace'}"
    where += f" under prefix {keys.prefix.decode()!r}"
    checkpoints, durable = _number(version, "", where), _number(fence, "durable ", where)
    newest = max(checkpoints or 0, durable or 0)
    if newest > int(LAYOUT):
        raise IncompatibleSchema(
            f"{where} has Redis layout {newest}, newer than this agentflow's ({LAYOUT.decode()});"
            " upgrade agentflow"
        )
    if checkpoints not in (None, 2) or durable not in (None, 1, 3):
        raise CheckpointCorrupted(f"{where} holds layout versions {version!r} and {fence!r}")
    legacy = checkpoints is None and await client.exists(keys.threads[0])
    if not create and checkpoints is None and durable is None and not legacy:
        raise StoreNotFound(f"no store: {where} has no keys")
    if legacy:
        await _summaries(client, keys)
    if durable is not None:
        await _records(client, keys)
    await client.mset({keys.version: LAYOUT, keys.runs[2]: LAYOUT})
