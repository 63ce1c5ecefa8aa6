"""The event part of the Redis store: the accepted-once log, one script per append.

Events of a namespace share one hash tag: a sequence counter, an id index
(event id -> sequence, digest and write id) and the event data, plus one
sorted set per run (and one per parent run) of its events' sequences. An
append is one script that accepts an id exactly once, so concurrent appends
of one id across processes agree; a re-sent append finds its own write id
and answers as the first one did. Replay reads one run's index (and its
children's) from a sequence on: a page costs O(log n + page).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from agentflow.checkpoint.envelope import RunParts, stored_event
from agentflow.checkpoint.events import EventsBase
from agentflow.checkpoint.redis.keys import Keys
from agentflow.checkpoint.redis.rows import encode_text, write_id
from agentflow.checkpoint.redis.scripts import LUA_COMMON, bind
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.run.events import (
    AcceptedEvent,
    AppendOnceResult,
    repeated_append,
    run_member,
)
from agentflow.durable.wire.canonical import canonical_json

__all__ = ["LUA_APPEND", "LUA_REPLAY", "LUA_REWRITE", "RedisEvents"]

T = TypeVar("T")

# KEYS n, id, ev, then the run and parent indexes the event joins; ARGV event
# id, digest, event bytes, write id, the position in KEYS of the parent index
# or ''. Returns {1, sequence} (accepted now, or by this append before a
# re-send) or {0, what the id index holds for the id}.
LUA_APPEND: Final = (
    bind("N ID EV")
    + LUA_COMMON
    + """
local found = redis.call('HGET', ID, ARGV[1])
if found then
  local seq, wid = string.match(found, '^(%d+):%x+:(%x+)$')
  if wid == ARGV[4] then return {1, seq} end  -- this append, re-sent
  return {0, found}
end
expect('string', {N})
expect('hash', {EV})
for i = 4, #KEYS do expect('zset', {KEYS[i]}) end
local seq = string.format('%d', redis.call('INCR', N))
redis.call('HSET', ID, ARGV[1], seq .. ':' .. ARGV[2] .. ':' .. ARGV[4])
redis.call('HSET', EV, seq, ARGV[3], seq .. 'm', ARGV[2] .. ':' .. ARGV[1])
if ARGV[5] ~= '' then redis.call('HSET', EV, seq .. 'p', KEYS[tonumber(ARGV[5])]) end
for i = 4, #KEYS do redis.call('ZADD', KEYS[i], seq, seq) end
return {1, seq}
"""
)

# KEYS ev, a run index, and optionally a parent index; ARGV the sequence to
# read after and how many. Merges the indexes in sequence order (an event in
# both appears once) and returns sequence, event bytes, "digest:event id" of each.
LUA_REPLAY: Final = """#!lua flags=no-writes
local count = tonumber(ARGV[2])
local function page(key)
  return redis.call('ZRANGE', key, '(' .. ARGV[1], '+inf', 'BYSCORE', 'LIMIT', 0, count)
end
local seqs = page(KEYS[2])
if KEYS[3] then
  local a, b, merged = seqs, page(KEYS[3]), {}
  local i, j = 1, 1
  while #merged < count and (a[i] or b[j]) do
    local x, y = tonumber(a[i]), tonumber(b[j])
    if y == nil or (x ~= nil and x <= y) then
      merged[#merged + 1] = a[i]
      if x == y then j = j + 1 end
      i = i + 1
    else
      merged[#merged + 1] = b[j]
      j = j + 1
    end
  end
  seqs = merged
end
local out = {}
for _, seq in ipairs(seqs) do
  local data = redis.call('HMGET', KEYS[1], seq, seq .. 'm')
  out[#out + 1] = seq
  out[#out + 1] = data[1]
  out[#out + 1] = data[2]
end
return out
"""

# KEYS id, ev; ARGV event id, its payload sealed anew. Returns 1, or 0 when
# no event has the id.
LUA_REWRITE: Final = (
    bind("ID EV")
    + """
local found = redis.call('HGET', ID, ARGV[1])
if not found then return 0 end
local seq = string.match(found, '^(%d+):')
if not seq or redis.call('HEXISTS', EV, seq .. 'm') == 0 then
  return redis.error_reply('AGENTFLOW_CORRUPT the event index names no event')
end
redis.call('HSET', EV, seq, ARGV[2])
return 1
"""
)


def _stored(event_id: str, found: bytes | None) -> tuple[str, int] | None:
    """The digest and sequence the id index holds for ``event_id``, None for none."""
    if found is None:
        return None
    parts = found.split(b":")
    if len(parts) != 3 or not parts[0].isdigit() or len(parts[1]) != 64:
        raise DurableCorrupted("checkpoint_row_invalid", f"stored event {event_id!r} is damaged")
    return parts[1].decode("ascii", "replace"), int(parts[0])


def _accepted(
    parts: RunParts, sequence: bytes, data: bytes | None, meta: bytes | None
) -> AcceptedEvent:
    digest, _, raw_id = (meta or b"").partition(b":")
    try:
        event_id = raw_id.decode()
    except UnicodeDecodeError:
        event_id = ""
    where = f"stored event {event_id!r} (sequence {sequence.decode('ascii', 'replace')})"
    if not event_id or not isinstance(data, bytes) or not sequence.isdigit():
        raise DurableCorrupted("checkpoint_row_invalid", f"{where} is damaged")
    cursor = {"sequence": int(sequence)}
    return stored_event(
        parts, event_id, digest.decode("ascii", "replace"), data, cursor=cursor, where=where
    )


class RedisEvents(EventsBase, abc.ABC):
    """The event part of :class:`~agentflow.checkpoint.redis.RedisCheckpointer`."""

    _client: aioredis.Redis
    _keys: Keys
    _lua: dict[str, AsyncScript]

    @abc.abstractmethod
    async def _redis(self, operation: str, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` once the store is set up, with redis-py's errors as ours."""

    async def _append_once(
        self, event_id: str, payload_digest: str, computed_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        name = encode_text(event_id, "checkpoint_value_invalid", "event_id")
        if computed_digest == payload_digest:
            run, parent = run_member(event, "run_id"), run_member(event, "parent_run_id")
            indexes = [] if run is None else [self._keys.event_index(run, parent=False)]
            position = b""
            if parent is not None:
                indexes.append(self._keys.event_index(parent, parent=True))
                position = b"%d" % (3 + len(indexes))
            data = self._parts.seal_event(event_id, canonical_json(event, what="event payload"))
            args = [name, payload_digest.encode(), data, write_id(), position]
            keys = [*self._keys.events, *indexes]
            reply = await self._redis(
                "append_once", lambda: self._lua["append"](keys=keys, args=args)
            )
            if reply[0] == 1:
                return AppendOnceResult(True, {"sequence": int(reply[1])})
            found: bytes | None = reply[1]
        else:  # refused either way; the stored digest decides which error
            ids = self._keys.events[1]
            found = cast(
                bytes | None,
                await self._redis("append_once", lambda: self._client.hget(ids, name)),
            )
        return repeated_append(event_id, payload_digest, computed_digest, _stored(event_id, found))

    async def _replay(
        self, run_id: str, after: int, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        encode_text(run_id, "checkpoint_value_invalid", "run_id")
        keys = [self._keys.events[2], self._keys.event_index(run_id, parent=False)]
        if include_children:
            keys.append(self._keys.event_index(run_id, parent=True))
        args = [b"%d" % after, b"%d" % count]
        reply = await self._redis("replay", lambda: self._lua["replay"](keys=keys, args=args))
        return [
            _accepted(self._parts, reply[i], reply[i + 1], reply[i + 2])
            for i in range(0, len(reply), 3)
        ]

    async def _rewrite_event(self, event_id: str, stored: bytes) -> bool:
        name = encode_text(event_id, "checkpoint_value_invalid", "event_id")
        keys = self._keys.events[1:]
        args = [name, stored]
        done = await self._redis("rekey", lambda: self._lua["rewrite"](keys=keys, args=args))
        return bool(done)
