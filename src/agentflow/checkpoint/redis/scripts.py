"""The Lua scripts of the Redis checkpointer and the key layout they work on.

For prefix ``P``, namespace ``N`` and thread ``T`` (``b64`` is unpadded
base64url of the UTF-8 bytes; ``docs/redis.md`` gives the reasons)::

    P:{t.b64(N).b64(T)}:s   ZSET    step index, score 0, member = 20-digit step
    P:{t.b64(N).b64(T)}:d   HASH    step -> payload bytes,
                                    step + "m" -> "revision:write-id:instant:summary"
    P:{n.b64(N)}:idx        ZSET    thread ids of N, score 0 (listing by BYLEX)
    P:{n.b64(N)}:exp        ZSET    thread id -> expiry deadline (ms), with ttl
    P:{n.b64(N)}:sum        HASH    thread id -> summary of its latest step
    P:{n.b64(N)}:st         ZSET    status letter + thread id, score 0
    P:{n.b64(N)}:due        ZSET    wake instant + thread id of waiting threads
    P:{n.b64(N)}:v          STR     layout version of the namespace
    P:secret                STR     the cursor secret of the prefix

A summary (:mod:`~agentflow.checkpoint.redis.records`) starts with the
thread's status letter and wake instant, which the scripts index. Instants
are 18 digits of microseconds since year 1, so they compare as strings.

Caller data never shapes a key: ids are base64url-encoded, whose alphabet
has no ``:``, ``{``, ``}`` or glob characters, and a prefix may not contain
a brace, so the first ``{`` of a key always opens our hash tag.

Every script reads (and so type-checks) each key it will write before its
first write: Redis does not undo the writes of a script that fails half way.
"""

from __future__ import annotations

import base64
from typing import Final

from agentflow.checkpoint.base import ThreadStatus
from agentflow.errors import InvalidArgument

__all__ = [
    "LAYOUT_VERSION",
    "LUA_DELETE",
    "LUA_LATEST",
    "LUA_PAGE",
    "LUA_PRUNE",
    "LUA_PUT",
    "LUA_SHARED",
    "STATUS_LETTERS",
    "SUMMARY_HEAD",
    "check_prefix",
    "due_range",
    "instant_bound",
    "listing_range",
    "namespace_keys",
    "secret_key",
    "sortable_instant",
    "step_member",
    "thread_base",
    "thread_keys",
    "utf8",
]

#: The layout this code writes; ``P:{n...}:v`` holds it once a namespace is on it.
LAYOUT_VERSION: Final = b"2"
#: Shifts epoch microseconds of year 1 to 0, so every instant is 18 sortable digits.
_EPOCH_SHIFT_US: Final = 62_135_596_800_000_000
#: Bytes of a stored summary before its JSON: status letter and wake instant.
SUMMARY_HEAD: Final = 19
#: The letter each status has in summaries and in the status index.
STATUS_LETTERS: Final[dict[ThreadStatus, bytes]] = {
    "running": b"r",
    "interrupted": b"i",
    "waiting": b"w",
    "done": b"d",
}

# The namespace indexes, shared by every script that changes a thread's latest
# step. Each script first binds IDX, EXP, SUM, ST and DUE to its KEYS.
LUA_SHARED = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function expect(kind, keys)
  for _, key in ipairs(keys) do
    local found = redis.call('TYPE', key)['ok']
    if found ~= kind and found ~= 'none' then
      error({err = 'AGENTFLOW_CORRUPT a ' .. kind .. ' key holds a ' .. found})
    end
  end
end
local function unindex(thread, summary)
  local letter = string.sub(summary, 1, 1)
  redis.call('ZREM', ST, letter .. thread)
  if letter == 'w' then redis.call('ZREM', DUE, string.sub(summary, 2, 19) .. thread) end
end
local function index(thread, summary)
  local letter = string.sub(summary, 1, 1)
  redis.call('ZADD', ST, 0, letter .. thread)
  if letter == 'w' then redis.call('ZADD', DUE, 0, string.sub(summary, 2, 19) .. thread) end
end
-- The thread's summary goes from `before` to `after` (false: not listed / gone).
local function resummarize(thread, before, after)
  if after then redis.call('HSET', SUM, thread, after) end
  if before and after and string.sub(before, 1, 19) == string.sub(after, 1, 19) then return end
  if before then unindex(thread, before) end
  if after then
    index(thread, after)
    if not before then redis.call('ZADD', IDX, 0, thread) end
  else
    redis.call('HDEL', SUM, thread)
    redis.call('ZREM', IDX, thread)
    redis.call('ZREM', EXP, thread)
  end
end
-- Forget threads whose keys expired: their deadline in EXP is past.
local function sweep(now, count)
  local gone = redis.call('ZRANGE', EXP, '-inf', string.format('(%d', now),
    'BYSCORE', 'LIMIT', 0, count)
  if #gone == 0 then return end
  for i, summary in ipairs(redis.call('HMGET', SUM, unpack(gone))) do
    if summary then unindex(gone[i], summary) end
  end
  redis.call('HDEL', SUM, unpack(gone))
  redis.call('ZREM', IDX, unpack(gone))
  redis.call('ZREM', EXP, unpack(gone))
end
"""

_THREAD_SCRIPT = """#!lua
local S, D = KEYS[1], KEYS[2]
local IDX, EXP, SUM, ST, DUE = KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
"""

# KEYS s d idx exp sum st due; ARGV step, payload, metadata tail ("write-id:
# instant:summary", fixed widths before the summary), expected revision or '',
# ttl ms or '', thread. Returns {1, revision} or {0, actual revision}.
LUA_PUT = (
    _THREAD_SCRIPT
    + LUA_SHARED
    + """
local step, thread, ttl = ARGV[1], ARGV[6], ARGV[5]
local meta = step .. 'm'
local old = redis.call('HGET', D, meta)
local rev = 0
if old then
  local r, wid = string.match(old, '^(%d+):(%x+):')
  if not r then return redis.error_reply('AGENTFLOW_CORRUPT step metadata') end
  rev = tonumber(r)
  if wid == string.sub(ARGV[3], 1, 32) then return {1, rev} end
end
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= rev then return {0, rev} end
local top = redis.call('ZRANGE', S, -1, -1)[1]
local latest = not top or step >= top
local summary = string.sub(ARGV[3], 53)
local before = false
if latest then
  before = redis.call('HGET', SUM, thread)
  if not before or string.sub(before, 1, 19) ~= string.sub(summary, 1, 19) then
    expect('zset', {IDX, ST, DUE})
  end
end
if ttl ~= '' then
  expect('zset', {EXP, IDX, ST, DUE})
  expect('hash', {SUM})
elseif not top then
  expect('zset', {EXP})
end
rev = rev + 1
redis.call('HSET', D, step, ARGV[2], meta, string.format('%d:', rev) .. ARGV[3])
if not old then redis.call('ZADD', S, 0, step) end
if latest then resummarize(thread, before, summary) end
if ttl ~= '' then
  local now = now_ms()
  local deadline = string.format('%d', now + tonumber(ttl))
  redis.call('PEXPIREAT', S, deadline)
  redis.call('PEXPIREAT', D, deadline)
  redis.call('ZADD', EXP, deadline, thread)
  sweep(now, 16)
elseif not top then
  redis.call('ZREM', EXP, thread)
elseif redis.call('PTTL', S) >= 0 then
  redis.call('PERSIST', S)
  redis.call('PERSIST', D)
  redis.call('ZREM', EXP, thread)
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

# KEYS s d idx exp sum st due; ARGV thread. Returns the number of steps deleted.
LUA_DELETE = (
    _THREAD_SCRIPT
    + LUA_SHARED
    + """
expect('zset', {S, IDX, EXP, ST, DUE})
expect('hash', {D, SUM})
local steps = redis.call('ZCARD', S)
local before = redis.call('HGET', SUM, ARGV[1])
redis.call('UNLINK', S, D)
resummarize(ARGV[1], before, false)
return steps
"""
)

# KEYS s d idx exp sum st due; ARGV exclusive upper step bound or '+', cutoff
# instant or '', thread, batch, scan start, and the summary the client worked
# out for a step stored without one (step, its metadata, summary; or '').
# Scans one batch of the step index and removes the steps older than the
# cutoff. Returns {removed, next scan start or ''}, or {-1, step, metadata}
# when the step that becomes the latest needs the client to work out its
# summary (it was written by layout 1); then nothing was changed.
LUA_PRUNE = (
    _THREAD_SCRIPT
    + LUA_SHARED
    + """
local function fields(steps, with_payload)
  local out = {}
  for _, step in ipairs(steps) do
    if with_payload then out[#out + 1] = step end
    out[#out + 1] = step .. 'm'
  end
  return out
end
local function parse(meta)
  local instant, summary = string.match(meta or '', '^%d+:%x+:(%d+):(.+)$')
  if not instant then error({err = 'AGENTFLOW_CORRUPT step metadata'}) end
  return instant, summary
end
expect('zset', {S, IDX, EXP, ST, DUE})
expect('hash', {D, SUM})
local batch = tonumber(ARGV[4])
local scanned = redis.call('ZRANGE', S, ARGV[5], ARGV[1], 'BYLEX', 'LIMIT', 0, batch)
local resume = ''
if #scanned == batch then resume = '(' .. scanned[#scanned] end
local steps = scanned
if ARGV[2] ~= '' and #scanned > 0 then
  steps = {}
  for i, meta in ipairs(redis.call('HMGET', D, unpack(fields(scanned, false)))) do
    if parse(meta) < ARGV[2] then steps[#steps + 1] = scanned[i] end
  end
end
if #steps == 0 then return {0, resume} end
local doomed = {}
for _, step in ipairs(steps) do doomed[step] = true end
local top = redis.call('ZRANGE', S, '+', '-', 'BYLEX', 'REV', 'LIMIT', 0, #steps + 1)
local survivor = false
for _, step in ipairs(top) do
  if not doomed[step] then survivor = step break end
end
local moved = doomed[top[1]]
local after = false
if moved and survivor then
  local meta = redis.call('HGET', D, survivor .. 'm')
  local _, summary = parse(meta)
  after = summary
  if string.sub(summary, 1, 1) == '{' then
    if ARGV[6] ~= survivor or ARGV[7] ~= meta then return {-1, survivor, meta} end
    after = ARGV[8]
  elseif not string.match(summary, '^[riwd]' .. string.rep('%d', 18)) then
    error({err = 'AGENTFLOW_CORRUPT step summary'})
  end
end
local before = moved and redis.call('HGET', SUM, ARGV[3])
redis.call('ZREM', S, unpack(steps))
redis.call('HDEL', D, unpack(fields(steps, true)))
if not moved then return {#steps, resume} end
if not survivor then
  redis.call('UNLINK', S, D)
  resume = ''
end
resummarize(ARGV[3], before, after)
return {#steps, resume}
"""
)

# KEYS idx exp sum st due, and the index to read (idx, st or due); ARGV lex
# start, lex stop, count, bytes of each member before the thread id. Sweeps,
# then reads up to count members. Returns {last member read if count were
# read, else ''; then thread id, summary (false if missing) of each
# unexpired thread read}.
LUA_PAGE = (
    """#!lua
local IDX, EXP, SUM, ST, DUE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
"""
    + LUA_SHARED
    + """
local now = now_ms()
sweep(now, 256)
local count = tonumber(ARGV[3])
local members = redis.call('ZRANGE', KEYS[6], ARGV[1], ARGV[2], 'BYLEX', 'LIMIT', 0, count)
if #members == 0 then return {''} end
local threads = {}
for i, member in ipairs(members) do threads[i] = string.sub(member, ARGV[4] + 1) end
local summaries = redis.call('HMGET', SUM, unpack(threads))
local deadlines = redis.call('ZMSCORE', EXP, unpack(threads))
local out = {''}
if #members == count then out[1] = members[#members] end
for i, thread in ipairs(threads) do
  if not deadlines[i] or tonumber(deadlines[i]) >= now then
    out[#out + 1] = thread
    out[#out + 1] = summaries[i]
  end
end
return out
"""
)


def utf8(text: str) -> bytes:
    """UTF-8 of an id; bytewise order of UTF-8 is code point order, which is
    why the namespace indexes store thread ids this way."""
    return text.encode()  # ids passed validation: never a lone surrogate


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def thread_base(prefix: str, namespace: str, thread: bytes) -> bytes:
    """What every key of one thread starts with: its hash tag, so a script
    over them touches one slot."""
    return b"%s:{t.%s.%s}:" % (prefix.encode(), _b64(utf8(namespace)), _b64(thread))


def thread_keys(prefix: str, namespace: str, thread: str) -> list[bytes]:
    """The two keys of one thread: step index and data."""
    base = thread_base(prefix, namespace, utf8(thread))
    return [base + b"s", base + b"d"]


def namespace_keys(prefix: str, namespace: str) -> list[bytes]:
    """The namespace's thread index, expiry deadlines, summaries, status and
    due indexes, and layout version, in that order."""
    base = b"%s:{n.%s}:" % (prefix.encode(), _b64(utf8(namespace)))
    return [base + kind for kind in (b"idx", b"exp", b"sum", b"st", b"due", b"v")]


def secret_key(prefix: str) -> bytes:
    """The key of the prefix's cursor secret; braceless, so no id key's twin."""
    return b"%s:secret" % prefix.encode()


def step_member(step: int) -> bytes:
    return b"%020d" % step


def sortable_instant(us: int) -> bytes:
    """An instant a record stores (never before 1970: the base refuses those),
    as 18 digits that compare as the instants do."""
    if us < 0:
        raise InvalidArgument(f"instant {us} µs is before 1970-01-01T00:00:00Z")
    return b"%018d" % (us + _EPOCH_SHIFT_US)


def instant_bound(us: int) -> bytes:
    """An instant a query compares against, as :func:`sortable_instant` would
    store it, clamped to the range a stored instant can have."""
    return b"%018d" % min(max(us + _EPOCH_SHIFT_US, 0), 10**18 - 1)


def listing_range(status: ThreadStatus | None, after: str) -> tuple[bytes, bytes, int]:
    """``ZRANGE BYLEX`` bounds of the threads after ``after`` (of ``status``
    when given: its index then) and the bytes each member has before the id."""
    if status is None:
        return (b"(" + utf8(after) if after else b"-"), b"+", 0
    letter = STATUS_LETTERS[status]
    start = b"(" + letter + utf8(after) if after else b"[" + letter
    return start, b"(" + bytes([letter[0] + 1]), 1


def due_range(now_us: int, after: tuple[int, str] | None) -> tuple[bytes, bytes, int]:
    """``ZRANGE BYLEX`` bounds of the due index: waits up to ``now_us``
    after ``after`` (wake instant, thread), and the bytes before each id."""
    start = b"-" if after is None else b"(" + instant_bound(after[0]) + utf8(after[1])
    return start, b"(" + instant_bound(now_us + 1), 18


def check_prefix(prefix: object) -> str:
    """A brace would let the prefix open the hash tag that must be ours."""
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise InvalidArgument(f"prefix must be a non-empty string without braces, got {prefix!r}")
    try:
        prefix.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"prefix {prefix!r} is not valid Unicode") from exc
    return prefix
