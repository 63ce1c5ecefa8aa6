"""Bringing a namespace written by layout 1 onto layout 2.

Layout 1 kept each thread's summary in a key of its own (``...:h``, plain
:class:`ThreadInfo` JSON) and had no status or due index. Layout 2 keeps the
summaries in the namespace (``sum``) with a status and wake prefix the
scripts index. A checkpointer brings its namespace over before its first
call: it pages the thread index, works out each summary's status and wake
instant here (Lua cannot parse ISO-8601 offsets), and moves it with one
script per page. A script skips a thread that a layout-2 write or a delete
already handled, so processes may migrate at once, and layout-2 writes may run
meanwhile. Step metadata keeps the layout-1 summary until the step is
rewritten; a prune that makes such a step the latest has its summary worked
out by :func:`upgrade_summary`.
"""

from __future__ import annotations

from typing import Final, cast

import orjson
import redis.asyncio as aioredis

from agentflow.checkpoint.base import ThreadInfo
from agentflow.checkpoint.redis.records import summary
from agentflow.checkpoint.redis.scripts import (
    LAYOUT_VERSION,
    LUA_SHARED,
    namespace_keys,
    thread_base,
)
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import AgentflowError, CheckpointCorrupted

__all__ = ["migrate_namespace", "upgrade_summary"]

#: Threads moved per script.
_PAGE: Final = 256

# KEYS idx exp sum st due, then the layout-1 summary key of each thread;
# ARGV thread, its new summary, the layout-1 summary it was worked out from,
# for each thread in turn.
_LUA_MIGRATE = (
    """#!lua
local IDX, EXP, SUM, ST, DUE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
"""
    + LUA_SHARED
    + """
for i = 6, #KEYS do
  local thread, new, seen = ARGV[3 * i - 17], ARGV[3 * i - 16], ARGV[3 * i - 15]
  if redis.call('HEXISTS', SUM, thread) == 0 and redis.call('ZSCORE', IDX, thread)
      and redis.call('GET', KEYS[i]) == seen then
    resummarize(thread, false, new)
  end
  redis.call('UNLINK', KEYS[i])
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


async def migrate_namespace(client: aioredis.Redis, prefix: str, namespace: str) -> None:
    """Move every summary of ``namespace`` to layout 2, then mark it so."""
    script = client.register_script(_LUA_MIGRATE)
    keys = namespace_keys(prefix, namespace)
    start = b"-"
    while True:
        names = cast(
            list[bytes], await client.zrange(keys[0], start, b"+", bylex=True, offset=0, num=_PAGE)
        )
        legacy = [thread_base(prefix, namespace, name) + b"h" for name in names]
        values = cast(list[bytes | None], await client.mget(legacy) if names else [])
        moved, args = [], []
        for name, key, value in zip(names, legacy, values, strict=True):
            if value is not None:
                moved.append(key)
                args += [name, upgrade_summary(value), value]
        if moved:
            await script(keys=[*keys[:5], *moved], args=args)
        if len(names) < _PAGE:
            break
        start = b"(" + names[-1]
    await client.set(keys[5], LAYOUT_VERSION)
