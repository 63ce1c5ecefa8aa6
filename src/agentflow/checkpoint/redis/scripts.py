"""The Lua scripts of :mod:`agentflow.checkpoint.redis` and the key layout they work on.

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
from typing import Final

from agentflow.errors import InvalidArgument

__all__ = [
    "LUA_DELETE",
    "LUA_LATEST",
    "LUA_LIST",
    "LUA_PRUNE",
    "LUA_PUT",
    "check_prefix",
    "namespace_keys",
    "sortable_instant",
    "step_member",
    "thread_keys",
    "utf8",
]

#: Shifts epoch microseconds of year 1 to 0, so every instant is 18 sortable digits.
_EPOCH_SHIFT_US: Final = 62_135_596_800_000_000

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
LUA_PUT = (
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
LUA_LATEST = """#!lua flags=no-writes
local latest = redis.call('ZRANGE', KEYS[1], -1, -1)
if #latest == 0 then return {} end
return {latest, redis.call('HMGET', KEYS[2], latest[1], latest[1] .. 'm')}
"""

# KEYS s d h idx exp; ARGV thread.
LUA_DELETE = """#!lua
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
"""

# KEYS s d h idx exp; ARGV exclusive upper step bound or '+', cutoff instant
# or '', thread, batch, scan start. Scans one batch of the step index and
# removes the steps older than the cutoff. Returns {removed, next start or ''}.
LUA_PRUNE = """#!lua
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
LUA_LIST = (
    "#!lua\n"
    + _LUA_SWEEP
    + """
sweep(KEYS[1], KEYS[2], now_ms(), 256)
return redis.call('ZRANGE', KEYS[1], ARGV[1], '+', 'BYLEX', 'LIMIT', ARGV[2], ARGV[3])
"""
)


def utf8(text: str) -> bytes:
    """UTF-8 of an id; bytewise order of UTF-8 is code point order, which is
    why the namespace index stores thread ids this way."""
    return text.encode()  # ids passed codec validation: never a lone surrogate


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64encode(utf8(text)).rstrip(b"=")


def thread_keys(prefix: str, namespace: str, thread: str) -> list[bytes]:
    """The three keys of one thread (step index, data, summary), all under
    one hash tag so a script over them touches one slot."""
    base = b"%s:{t.%s.%s}:" % (prefix.encode(), _b64(namespace), _b64(thread))
    return [base + kind for kind in (b"s", b"d", b"h")]


def namespace_keys(prefix: str, namespace: str) -> list[bytes]:
    """The namespace's thread index and its expiry deadlines."""
    base = b"%s:{n.%s}:" % (prefix.encode(), _b64(namespace))
    return [base + b"idx", base + b"exp"]


def step_member(step: int) -> bytes:
    return b"%020d" % step


def sortable_instant(ts_us: int) -> bytes:
    return b"%018d" % (ts_us + _EPOCH_SHIFT_US)


def check_prefix(prefix: object) -> str:
    """A brace would let the prefix open the hash tag that must be ours."""
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise InvalidArgument(f"prefix must be a non-empty string without braces, got {prefix!r}")
    try:
        prefix.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"prefix {prefix!r} is not valid Unicode") from exc
    return prefix
