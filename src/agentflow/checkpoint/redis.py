"""A durable checkpointer on plain Redis 7 or Valkey (no modules).

Every mutation is one Lua script, so it is atomic and costs one round trip.
For prefix ``P``, namespace ``N`` and thread ``T`` (``b64`` is unpadded
base64url of the UTF-8 bytes; ``docs/redis.md`` gives the reasons)::

    P:{t.b64(N).b64(T)}:s   ZSET  step index, score 0, member = 20-digit step
    P:{t.b64(N).b64(T)}:d   HASH  step -> payload bytes,
                                  step + "m" -> "revision:write-id:instant:summary"
    P:{t.b64(N).b64(T)}:h   STR   summary of the latest step (JSON)
    P:{n.b64(N)}:idx        ZSET  thread ids of N, score 0 (listing by BYLEX)
    P:{n.b64(N)}:exp        ZSET  thread id -> expiry deadline (ms), with ttl

Caller data never shapes a key: ids are base64url-encoded, whose alphabet has
no ``:``, ``{``, ``}`` or glob characters, and a prefix may not contain a
brace, so the first ``{`` of a key always opens our hash tag.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agentflow.checkpoint.base import AsyncClosing, Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.codec import (
    decode,
    encode,
    parse_instant,
    validate_namespace,
    validate_step,
    validate_thread,
)
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.checkpoint.paging import check_page_args, check_prune_bounds
from agentflow.checkpoint.redaction import redact_none
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    InvalidThreadId,
    StoreUnavailable,
)

__all__ = ["RedisCheckpointer", "namespace_keys", "thread_keys"]

_BACKEND = "redis"
#: Step ids per history index read, and the most payloads per data read.
_BATCH = 128
#: Payload bytes a history data read aims for, so memory stays bounded even
#: when single states are megabytes.
_HISTORY_BYTES = 4 * 1024 * 1024
#: Steps removed per prune script, bounding how long one call holds the server.
_PRUNE_BATCH = 1024
#: Shifts epoch microseconds of year 1 to 0, so every instant is 18 sortable digits.
_EPOCH_SHIFT_US = 62_135_596_800_000_000

# Shared by a put with ttl and by listing: drop index entries of threads whose
# keys expired (their deadline in ``exp`` is past; see docs/redis.md, TTL).
_LUA_SWEEP = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function sweep(idx, exp, now, count)
  local gone = redis.call('ZRANGE', exp, '-inf', string.format('(%d', now),
    'BYSCORE', 'LIMIT', 0, count)
  if #gone > 0 then
    redis.call('ZREM', idx, unpack(gone))
    redis.call('ZREM', exp, unpack(gone))
  end
end
"""

# KEYS s d h idx exp; ARGV step, payload, metadata tail ("write-id:instant:
# summary", fixed widths before the summary), expected revision or '', ttl ms
# or '', thread. Returns {1, revision} or {0, actual revision}.
_LUA_PUT = (
    "#!lua\n"
    + _LUA_SWEEP
    + """
local meta = ARGV[1] .. 'm'
local old = redis.call('HGET', KEYS[2], meta)
local rev = 0
if old then
  local r, wid = string.match(old, '^(%d+):(%x+):')
  if not r then return redis.error_reply('AGENTFLOW_CORRUPT step metadata') end
  rev = tonumber(r)
  if wid == string.sub(ARGV[3], 1, 32) then return {1, rev} end
end
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= rev then return {0, rev} end
rev = rev + 1
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2], meta, string.format('%d:', rev) .. ARGV[3])
if not old then redis.call('ZADD', KEYS[1], 0, ARGV[1]) end
if redis.call('ZRANGE', KEYS[1], -1, -1)[1] == ARGV[1] then
  if not redis.call('SET', KEYS[3], string.sub(ARGV[3], 53), 'GET') then
    redis.call('ZADD', KEYS[4], 0, ARGV[6])
  end
end
if ARGV[5] ~= '' then
  local now = now_ms()
  local deadline = string.format('%d', now + tonumber(ARGV[5]))
  for i = 1, 3 do redis.call('PEXPIREAT', KEYS[i], deadline) end
  redis.call('ZADD', KEYS[5], deadline, ARGV[6])
  sweep(KEYS[4], KEYS[5], now, 16)
elseif redis.call('PTTL', KEYS[1]) >= 0 then
  for i = 1, 3 do redis.call('PERSIST', KEYS[i]) end
  redis.call('ZREM', KEYS[5], ARGV[6])
end
return {1, rev}
"""
)

# KEYS s d. Returns {} or {{latest step}, {payload, metadata}}, one snapshot.
_LUA_LATEST = """#!lua flags=no-writes
local latest = redis.call('ZRANGE', KEYS[1], -1, -1)
if #latest == 0 then return {} end
return {latest, redis.call('HMGET', KEYS[2], latest[1], latest[1] .. 'm')}
"""

# KEYS s d h idx exp; ARGV thread.
_LUA_DELETE = """#!lua
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
"""

# KEYS s d h idx exp; ARGV exclusive upper step bound or '+', cutoff instant
# or '', thread, batch, scan start. Scans one batch of the step index and
# removes the steps older than the cutoff. Returns {removed, next start or ''}.
_LUA_PRUNE = """#!lua
local function fields(steps, with_payload)
  local out = {}
  for _, step in ipairs(steps) do
    if with_payload then out[#out + 1] = step end
    out[#out + 1] = step .. 'm'
  end
  return out
end
local function parse(meta)
  local instant, summary = string.match(meta or '', '^%d+:%x+:(%d+):(.*)$')
  if not instant then error({err = 'AGENTFLOW_CORRUPT step metadata'}) end
  return instant, summary
end
local batch = tonumber(ARGV[4])
local scanned = redis.call('ZRANGE', KEYS[1], ARGV[5], ARGV[1], 'BYLEX', 'LIMIT', 0, batch)
local resume = ''
if #scanned == batch then resume = '(' .. scanned[#scanned] end
local steps = scanned
if ARGV[2] ~= '' and #scanned > 0 then
  steps = {}
  for i, meta in ipairs(redis.call('HMGET', KEYS[2], unpack(fields(scanned, false)))) do
    if parse(meta) < ARGV[2] then steps[#steps + 1] = scanned[i] end
  end
end
if #steps == 0 then return {0, resume} end
redis.call('ZREM', KEYS[1], unpack(steps))
redis.call('HDEL', KEYS[2], unpack(fields(steps, true)))
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3])
  redis.call('ZREM', KEYS[4], ARGV[3])
  redis.call('ZREM', KEYS[5], ARGV[3])
  return {#steps, ''}
end
local latest = redis.call('ZRANGE', KEYS[1], -1, -1)[1]
local _, summary = parse(redis.call('HGET', KEYS[2], latest .. 'm'))
redis.call('SET', KEYS[3], summary, 'KEEPTTL')
return {#steps, resume}
"""

# KEYS idx exp; ARGV lex start, offset, count. Sweeps, then lists thread ids.
_LUA_LIST = (
    "#!lua\n"
    + _LUA_SWEEP
    + """
sweep(KEYS[1], KEYS[2], now_ms(), 256)
return redis.call('ZRANGE', KEYS[1], ARGV[1], '+', 'BYLEX', 'LIMIT', ARGV[2], ARGV[3])
"""
)


def _utf8(text: str) -> bytes:
    """UTF-8 of an id; bytewise order of UTF-8 is code point order, which is
    why the namespace index stores thread ids this way."""
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise InvalidThreadId(f"id {text!r} is not encodable as UTF-8") from exc


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64encode(_utf8(text)).rstrip(b"=")


def thread_keys(prefix: str, namespace: str, thread: str) -> list[bytes]:
    """The three keys of one thread (step index, data, summary), all under
    one hash tag so a script over them touches one slot."""
    base = b"%s:{t.%s.%s}:" % (prefix.encode(), _b64(namespace), _b64(thread))
    return [base + kind for kind in (b"s", b"d", b"h")]


def namespace_keys(prefix: str, namespace: str) -> list[bytes]:
    """The namespace's thread index and its expiry deadlines."""
    base = b"%s:{n.%s}:" % (prefix.encode(), _b64(namespace))
    return [base + b"idx", base + b"exp"]


def _step_member(step: int) -> bytes:
    return b"%020d" % step


def _instant(ts_us: int) -> bytes:
    return b"%018d" % (ts_us + _EPOCH_SHIFT_US)


@contextmanager
def _driver_errors(action: str) -> Iterator[None]:
    """Translate redis-py errors; CancelledError is not an Exception and passes."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, ReadOnlyError) as exc:
        raise StoreUnavailable(f"redis {action} failed: {exc}") from exc
    except ResponseError as exc:
        text = str(exc)
        if text.startswith(("AGENTFLOW_CORRUPT", "WRONGTYPE")):
            raise CheckpointCorrupted(f"redis {action}: stored data is damaged: {text}") from exc
        raise CheckpointError(f"redis {action} failed: {text}") from exc
    except RedisError as exc:
        raise CheckpointError(f"redis {action} failed: {exc}") from exc


def _check_prefix(prefix: object) -> str:
    """A brace would let the prefix open the hash tag that must be ours."""
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise InvalidArgument(f"prefix must be a non-empty string without braces, got {prefix!r}")
    _utf8(prefix)
    return prefix


def _ttl_ms(ttl: object) -> bytes:
    if ttl is None:
        return b""
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not 0 < ttl <= 10 * 365 * 86_400
    ):
        raise InvalidArgument(f"ttl must be None or seconds in (0, 10 years], got {ttl!r}")
    return b"%d" % max(1, round(ttl * 1000))


class RedisCheckpointer(AsyncClosing):
    """Checkpoints in Redis, one atomic Lua script per write.

    Pass a ``url`` (we create, own and close the client) or an async
    ``client`` (it stays yours: ``close()`` leaves it open; it must use
    ``decode_responses=False``). The client we create never retries a command
    by itself: a retried script could land twice. An injected client may
    retry; every write carries a random write id, and a script that finds its
    own id already stored returns the stored revision instead of writing
    again, so a driver-level re-send after a lost reply is harmless.

    ``ttl`` (seconds) makes a thread expire that long after its last write by
    a checkpointer with a ttl; a write without ttl makes the thread permanent.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "agentflow",
        redact: Redactor | None = None,
        namespace: str | None = None,
        ttl: float | None = None,
    ) -> None:
        self._prefix = _check_prefix(prefix)
        self._namespace = validate_namespace(namespace)
        self._ttl_ms = _ttl_ms(ttl)
        self._redact = redact or redact_none
        if client is not None and client.connection_pool.connection_kwargs.get("decode_responses"):
            raise InvalidArgument("the redis client must use decode_responses=False")
        self._owned = client is None
        self._client: aioredis.Redis = client or aioredis.Redis.from_url(
            url, decode_responses=False, retry=Retry(NoBackoff(), 0)
        )
        self._ns_keys = namespace_keys(self._prefix, self._namespace)
        self._put_script = self._client.register_script(_LUA_PUT)
        self._latest_script = self._client.register_script(_LUA_LATEST)
        self._delete_script = self._client.register_script(_LUA_DELETE)
        self._prune_script = self._client.register_script(_LUA_PRUNE)
        self._list_script = self._client.register_script(_LUA_LIST)
        self._closed = False

    async def close(self) -> None:
        """Close the client if we created it; an injected client stays open."""
        if self._owned and not self._closed:
            self._closed = True
            await self._client.aclose()

    def _thread_keys(self, thread: str) -> list[bytes]:
        return thread_keys(self._prefix, self._namespace, thread)

    async def _call(
        self, script: AsyncScript, keys: Sequence[bytes], args: Sequence[Any], action: str
    ) -> Any:
        with _driver_errors(action):
            return await script(keys=keys, args=args)

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        if if_revision is not None and (
            isinstance(if_revision, bool) or not isinstance(if_revision, int) or if_revision < 0
        ):
            raise InvalidArgument(f"if_revision must be None or an int >= 0, got {if_revision!r}")
        enc = encode(cp, self._redact)
        summary = orjson.dumps(
            {
                "latest_step": enc.step,
                "interrupted": enc.interrupted,
                "done": enc.done,
                "ts": enc.ts,
                "wake_at": enc.wake_at,
            }
        )
        tail = b"%s:%s:%s" % (os.urandom(16).hex().encode(), _instant(enc.ts_us), summary)
        expected = b"" if if_revision is None else b"%d" % if_revision
        args = (
            _step_member(enc.step),
            enc.payload,
            tail,
            expected,
            self._ttl_ms,
            _utf8(enc.thread),
        )
        keys = [*self._thread_keys(enc.thread), *self._ns_keys]
        written, revision = await self._call(self._put_script, keys, args, "put")
        if not written:
            raise CheckpointConflict(enc.thread, enc.step, if_revision or 0, int(revision))
        return f"{enc.thread}:{enc.step}"

    def _decode(
        self, thread: str, steps: list[bytes], values: list[Any], indexed: bool
    ) -> Iterator[Checkpoint]:
        """Decode one at a time, so a caller that drops each checkpoint keeps
        at most one decoded state alive (and the garbage collector idle).

        ``values`` alternate payload and metadata. ``indexed`` steps came from
        the step index in the same snapshot, so data missing for them is
        damage, not absence."""
        for member, payload, meta in zip(steps, values[::2], values[1::2], strict=True):
            if payload is None and meta is None and not indexed:
                continue
            try:
                if meta is None:
                    raise ValueError("no metadata")
                revision = int(meta.split(b":", 1)[0])
            except ValueError as exc:
                raise CheckpointCorrupted(
                    f"thread {thread!r} step {member.decode()}: metadata is damaged"
                ) from exc
            if payload is None:
                raise CheckpointCorrupted(f"thread {thread!r} step {member.decode()}: no payload")
            cp = decode(payload, revision)
            if cp.thread != thread or cp.step != int(member):
                raise CheckpointCorrupted(
                    f"thread {thread!r} step {member.decode()} holds another checkpoint"
                )
            yield cp

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        thread = validate_thread(thread)
        index, data = self._thread_keys(thread)[:2]
        if step is None:
            rows = await self._call(self._latest_script, (index, data), (), "get")
            steps, values = rows or ([], [])
        else:
            steps = [_step_member(validate_step(step))]
            with _driver_errors("get"):
                values = await self._client.hmget(data, [steps[0], steps[0] + b"m"])
        return next(self._decode(thread, steps, values, indexed=step is None), None)

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        """Reads step ids in keyset batches, then their data in reads sized by
        the payload bytes seen so far: plain commands, no payload through Lua.

        Each data read is one ``HMGET`` (payload and revision from one
        instant). A step pruned between the two reads is skipped; a step still
        indexed but without data is damage."""
        thread = validate_thread(thread)
        index, data = self._thread_keys(thread)[:2]
        start, chunk = b"-", 1
        while True:
            with _driver_errors("history"):
                steps = cast(
                    list[bytes],
                    await self._client.zrange(index, start, b"+", bylex=True, offset=0, num=_BATCH),
                )
            done = 0
            while done < len(steps):
                part = steps[done : done + chunk]
                done += len(part)
                fields = [field for step in part for field in (step, step + b"m")]
                with _driver_errors("history"):
                    values = await self._client.hmget(data, fields)
                    gone = [s.decode() for s, v in zip(part, values[::2], strict=True) if v is None]
                    still = await self._client.zmscore(index, gone) if gone else []
                    if any(score is not None for score in still):
                        raise CheckpointCorrupted(f"thread {thread!r}: indexed steps lack data")
                size = sum(len(v) for v in values[::2] if v is not None)
                chunk = max(1, min(_BATCH, _HISTORY_BYTES * len(part) // max(size, 1)))
                for cp in self._decode(thread, part, values, indexed=False):
                    yield cp
            if len(steps) < _BATCH:
                return
            start = b"(" + steps[-1]

    async def _summaries(self, names: list[bytes]) -> list[ThreadInfo | None]:
        """Summaries of ``names`` in one round trip; None where the thread
        expired or was deleted since the index was read."""
        try:
            threads = [name.decode() for name in names]
        except UnicodeDecodeError as exc:
            raise CheckpointCorrupted("the thread index holds an id that is not UTF-8") from exc
        async with self._client.pipeline(transaction=False) as pipe:
            for thread in threads:
                pipe.get(self._thread_keys(thread)[2])
            with _driver_errors("list"):
                raws = await pipe.execute()
        infos: list[ThreadInfo | None] = []
        for thread, raw in zip(threads, raws, strict=True):
            try:
                infos.append(None if raw is None else ThreadInfo(thread, **orjson.loads(raw)))
            except (TypeError, ValueError) as exc:
                raise CheckpointCorrupted(f"summary of thread {thread!r} is damaged") from exc
        return infos

    async def _collect(
        self, start: bytes, offset: int, limit: int
    ) -> tuple[list[ThreadInfo], bool]:
        """Up to ``limit`` live threads from ``start``, and whether more follow.

        Index entries whose summary is gone are skipped and the scan goes on,
        so a page stays full while expired threads await their sweep."""
        infos: list[ThreadInfo] = []
        while True:
            want = limit - len(infos) + 1
            args = (start, offset, want)
            names = await self._call(self._list_script, self._ns_keys, args, "list")
            for info in await self._summaries(names):
                if info is None:
                    continue
                if len(infos) == limit:
                    return infos, True
                infos.append(info)
            if len(names) < want:
                return infos, False
            start, offset = b"(" + names[-1], 0

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        check_page_args(limit, offset)
        infos, _ = await self._collect(b"-", offset, limit)
        return infos

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        check_page_args(limit)
        start = b"-"
        if cursor is not None:
            start = b"(" + decode_cursor(_BACKEND, self._namespace, cursor).encode()
        infos, more = await self._collect(start, 0, limit)
        next_cursor = encode_cursor(_BACKEND, self._namespace, infos[-1].thread) if more else None
        return ThreadPage(infos, next_cursor)

    async def delete_thread(self, thread: str) -> None:
        thread = validate_thread(thread)
        keys = [*self._thread_keys(thread), *self._ns_keys]
        await self._call(self._delete_script, keys, (_utf8(thread),), "delete_thread")

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        cutoff = (
            b"" if older_than is None else _instant(parse_instant(older_than, what="older_than"))
        )
        thread = validate_thread(thread)
        keys = [*self._thread_keys(thread), *self._ns_keys]
        before = b"+" if before_step is None else b"(" + _step_member(before_step)
        removed, resume = 0, b"-"
        while resume:
            args = (before, cutoff, _utf8(thread), _PRUNE_BATCH, resume)
            count, resume = await self._call(self._prune_script, keys, args, "prune")
            removed += int(count)
        return removed
