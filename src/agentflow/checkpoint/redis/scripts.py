"""The Lua of the checkpoint part: shared functions and the step scripts.

Each script is one atomic round trip. Redis does not undo the writes of a
script that fails half way, so every script reads (and so type-checks) each
key it will write, and parses every stored value it depends on, before its
first write: a script that fails has written nothing. The functions come in
pairs for that reason: ``plan_*`` only reads and decides, ``write_*`` /
``apply_*`` only writes, so a script that writes several parts (a step and a
record, in :mod:`~agentflow.checkpoint.redis.run_scripts`) plans them all first.

A summary (:mod:`~agentflow.checkpoint.redis.records`) starts with the
status letter of the thread's latest step and its wake instant, which the
scripts index without parsing JSON. The status index holds the letter the
record imposes (``rs``) where it imposes one, else the summary's; the due
index follows the step alone.
"""

from __future__ import annotations

from typing import Final

from agentflow.checkpoint.redis.keys import IMPOSED
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

__all__ = [
    "LUA_COMMON",
    "LUA_LATEST",
    "LUA_PAGE",
    "LUA_PRUNE",
    "LUA_PUT",
    "LUA_THREADS",
    "bind",
]


def bind(names: str) -> str:
    """``#!lua`` and a line naming ``KEYS`` in order: ``bind("S D")`` -> ``local S, D = ...``."""
    keys = names.split()
    values = ", ".join(f"KEYS[{i}]" for i in range(1, len(keys) + 1))
    return f"#!lua\nlocal {', '.join(keys)} = {values}\n"


_IMPOSED = ", ".join(f"{s.value} = '{letter.decode()}'" for s, letter in IMPOSED.items())

LUA_COMMON: Final = f"""
local MAX = {MAX_WIRE_INTEGER}
-- The thread letter a record's status imposes, by status (false: none).
local IMPOSED = {{{_IMPOSED}}}
local function fmt(n) return string.format('%d', n) end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function expect(kind, keys)
  for _, key in ipairs(keys) do
    local found = redis.call('TYPE', key)['ok']
    if found ~= kind and found ~= 'none' then
      error({{err = 'AGENTFLOW_CORRUPT a ' .. kind .. ' key holds a ' .. found}})
    end
  end
end
-- A stored count, or nil when it is not one (the client names the damage).
local function count(text)
  if text ~= '0' and not string.match(text or '', '^[1-9]%d*$') then return nil end
  local n = tonumber(text)
  if n > MAX then return nil end
  return n
end
"""

# What changes a thread's latest step or its record's imposed status; needs
# IDX, EXP, SUM, ST, DUE and RS bound.
LUA_THREADS: Final = """
local function letter_of(thread, summary)
  return redis.call('HGET', RS, thread) or string.sub(summary, 1, 1)
end
local function unindex(thread, summary)
  redis.call('ZREM', ST, letter_of(thread, summary) .. thread)
  if string.sub(summary, 1, 1) == 'w' then
    redis.call('ZREM', DUE, string.sub(summary, 2, 19) .. thread)
  end
end
local function index(thread, summary)
  redis.call('ZADD', ST, 0, letter_of(thread, summary) .. thread)
  if string.sub(summary, 1, 1) == 'w' then
    redis.call('ZADD', DUE, 0, string.sub(summary, 2, 19) .. thread)
  end
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
  expect('zset', {IDX, ST, DUE})
  expect('hash', {SUM, RS})
  for i, summary in ipairs(redis.call('HMGET', SUM, unpack(gone))) do
    if summary then unindex(gone[i], summary) end
  end
  redis.call('HDEL', SUM, unpack(gone))
  redis.call('ZREM', IDX, unpack(gone))
  redis.call('ZREM', EXP, unpack(gone))
end
-- The thread's record now imposes `new` (a letter, or false): what to move, or false.
local function plan_impose(thread, new)
  local old = redis.call('HGET', RS, thread)
  if old == new then return false end
  local summary = redis.call('HGET', SUM, thread)
  if summary then expect('zset', {ST}) end
  return {old = old, new = new, summary = summary}
end
local function apply_impose(thread, p)
  if not p then return end
  if p.summary then
    local letter = string.sub(p.summary, 1, 1)
    redis.call('ZREM', ST, (p.old or letter) .. thread)
    redis.call('ZADD', ST, 0, (p.new or letter) .. thread)
  end
  if p.new then redis.call('HSET', RS, thread, p.new) else redis.call('HDEL', RS, thread) end
end
-- A put of `step` (tail: "write-id:instant:summary", fixed widths before the
-- summary; expected: a revision or ''; ttl: ms or ''). Returns {answer = reply}
-- for a conflict ({0, stored revision}) or this write re-sent ({1, revision}).
local function plan_put(step, tail, expected, ttl, thread)
  local meta = redis.call('HGET', D, step .. 'm')
  local rev = 0
  if meta then
    local r, wid = string.match(meta, '^(%d+):(%x+):')
    if not r then error({err = 'AGENTFLOW_CORRUPT step metadata'}) end
    rev = tonumber(r)
    if wid == string.sub(tail, 1, 32) then return {answer = {1, rev}} end
  end
  if expected ~= '' and tonumber(expected) ~= rev then return {answer = {0, rev}} end
  local top = redis.call('ZRANGE', S, -1, -1)[1]
  local p = {rev = rev, new = not meta, top = top, summary = string.sub(tail, 53), before = false}
  p.latest = not top or step >= top
  if p.latest then
    p.before = redis.call('HGET', SUM, thread)
    if not p.before or string.sub(p.before, 1, 19) ~= string.sub(p.summary, 1, 19) then
      expect('zset', {IDX, ST, DUE})
      expect('hash', {RS})
    end
  end
  if ttl ~= '' then
    expect('zset', {EXP, IDX, ST, DUE})
    expect('hash', {SUM, RS})
  elseif not top then
    expect('zset', {EXP})
  end
  return p
end
local function write_put(p, step, payload, tail, ttl, thread)
  local rev = p.rev + 1
  redis.call('HSET', D, step, payload, step .. 'm', fmt(rev) .. ':' .. tail)
  if p.new then redis.call('ZADD', S, 0, step) end
  if p.latest then resummarize(thread, p.before, p.summary) end
  if ttl ~= '' then
    local now = now_ms()
    local deadline = fmt(now + tonumber(ttl))
    redis.call('PEXPIREAT', S, deadline)
    redis.call('PEXPIREAT', D, deadline)
    redis.call('ZADD', EXP, deadline, thread)
    sweep(now, 16)
  elseif not p.top then
    redis.call('ZREM', EXP, thread)
  elseif redis.call('PTTL', S) >= 0 then
    redis.call('PERSIST', S)
    redis.call('PERSIST', D)
    redis.call('ZREM', EXP, thread)
  end
  return {1, rev}
end
"""

_THREAD: Final = bind("S D IDX EXP SUM ST DUE RS") + LUA_COMMON + LUA_THREADS

# KEYS s d idx exp sum st due rs; ARGV step, payload, metadata tail,
# expected revision or '', ttl ms or '', thread. Returns {1, revision} or
# {0, actual revision}.
LUA_PUT: Final = (
    _THREAD
    + """
local p = plan_put(ARGV[1], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if p.answer then return p.answer end
return write_put(p, ARGV[1], ARGV[2], ARGV[3], ARGV[5], ARGV[6])
"""
)

# KEYS s d. Returns {} or {{latest step}, {payload, metadata}}, one snapshot.
LUA_LATEST: Final = """#!lua flags=no-writes
local latest = redis.call('ZRANGE', KEYS[1], -1, -1)
if #latest == 0 then return {} end
return {latest, redis.call('HMGET', KEYS[2], latest[1], latest[1] .. 'm')}
"""

# KEYS s d idx exp sum st due rs; ARGV exclusive upper step bound or '+',
# cutoff instant or '', thread, batch, scan start, and the summary the client
# worked out for a step stored without one (step, its metadata, summary; or
# ''). Scans one batch of the step index and removes the steps older than the
# cutoff. Returns {removed, next scan start or ''}, or {-1, step, metadata}
# when the step that becomes the latest needs the client to work out its
# summary (it was written by layout 1); then nothing was changed.
LUA_PRUNE: Final = (
    _THREAD
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
expect('hash', {D, SUM, RS})
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

# KEYS idx exp sum st due rs, and the index to read (idx, st or due); ARGV lex
# start, lex stop, count, bytes of each member before the thread id. Sweeps,
# then reads up to count members. Returns {last member read if count were
# read, else ''; then thread id, summary (false if missing) and imposed
# status (false if none) of each unexpired thread read}.
LUA_PAGE: Final = (
    bind("IDX EXP SUM ST DUE RS")
    + LUA_COMMON
    + LUA_THREADS
    + """
local now = now_ms()
sweep(now, 256)
local count = tonumber(ARGV[3])
local members = redis.call('ZRANGE', KEYS[7], ARGV[1], ARGV[2], 'BYLEX', 'LIMIT', 0, count)
if #members == 0 then return {''} end
local threads = {}
for i, member in ipairs(members) do threads[i] = string.sub(member, ARGV[4] + 1) end
local summaries = redis.call('HMGET', SUM, unpack(threads))
local imposed = redis.call('HMGET', RS, unpack(threads))
local deadlines = redis.call('ZMSCORE', EXP, unpack(threads))
local out = {''}
if #members == count then out[1] = members[#members] end
for i, thread in ipairs(threads) do
  if not deadlines[i] or tonumber(deadlines[i]) >= now then
    out[#out + 1] = thread
    out[#out + 1] = summaries[i]
    out[#out + 1] = imposed[i]
  end
end
return out
"""
)
