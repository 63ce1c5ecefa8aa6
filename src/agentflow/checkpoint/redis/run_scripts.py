"""The Lua of the record part, and of the scripts that cross the parts.

Every record script compares head fields of the run's hash and writes the
head, the body and at most the journal entries it names, with the record
status index and the thread status the record imposes (``rs`` and ``st``
of :mod:`~agentflow.checkpoint.redis.keys`), atomically; leases are taken
from the server's clock (``TIME``) inside the script. Each write stores its
random write id, and a script that finds its own id already stored answers
as the write did: a driver that re-sends a script after a lost reply
changes nothing. ``commit_step`` is one script (a step's put and a record
write, planned before either is written) and so is a thread's delete.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Final

from agentflow.checkpoint.redis.keys import RUN_LETTERS
from agentflow.checkpoint.redis.scripts import LUA_COMMON, LUA_THREADS, bind
from agentflow.checkpoint.rows import RunHead

__all__ = [
    "FIELDS",
    "HEAD_FIELDS",
    "RECORD_LIB",
    "LUA_CLAIM",
    "LUA_COMMIT",
    "LUA_CREATE",
    "LUA_DELETE",
    "LUA_HEADS",
    "LUA_RENEW",
    "LUA_WRITE",
]

#: The head fields of a run's hash: the fields of RunHead, by name.
HEAD_FIELDS: Final = tuple(field.name for field in fields(RunHead))
#: What a script reads of a run: its head, the last write id and both journal lengths.
FIELDS: Final = (*HEAD_FIELDS, "write_id", "jm", "jt")


def _lua_list(names: tuple[str, ...]) -> str:
    return "{" + ", ".join(f"'{name}'" for name in names) + "}"


_LETTERS = ", ".join(f"{s.value} = '{letter.decode()}'" for s, letter in RUN_LETTERS.items())

# Field names, status letters, readers that never trust a stored value, and
# the planned write (needs RUN, DST and the names of LUA_THREADS' impose bound).
_RUNS: Final = (
    f"""
local FIELDS = {_lua_list(FIELDS)}
local LETTER = {{{_LETTERS}}}
-- every field of a run's hash but the journal entries: FIELDS and the body
local FIXED = #FIELDS + 1
-- The run's FIELDS as stored (false where missing), and by name.
local function read(run)
  local values = redis.call('HMGET', run, unpack(FIELDS))
  local head = {{}}
  for i, name in ipairs(FIELDS) do head[name] = values[i] end
  return values, head
end
-- Whether the hash holds exactly its fields and journal entries (and the run
-- definition's digest, df, if it was created with one), and the journal lengths.
local function intact(run, head)
  local nm, nt = count(head.jm), count(head.jt)
  if not (nm and nt and LETTER[head.status]) then return false end
  local df = redis.call('HEXISTS', run, 'df')
  return redis.call('HLEN', run) == FIXED + df + nm + nt, nm, nt
end
-- The holder index (CT): one member per claimed run, its claim token, a NUL and
-- the run's key, kept in step with every write that changes a claim token (each
-- checks CT's type first, with the other keys it writes).
local function reholder(run, before, after)
  if before == after then return end
  if before and before ~= '' then redis.call('ZREM', CT, before .. '\\0' .. run) end
  if after and after ~= '' then redis.call('ZADD', CT, 0, after .. '\\0' .. run) end
end
local function put(items, name, value)
  items[#items + 1] = name
  items[#items + 1] = value
end
-- HSET / HDEL of a flat list, in slices Lua's unpack can take.
local function apply(command, run, items)
  for i = 1, #items, 1000 do
    redis.call(command, run, unpack(items, i, math.min(i + 999, #items)))
  end
end
local function restatus(key, before, after)
  if before == after then return end
  redis.call('ZREM', DST, LETTER[before] .. key)
  redis.call('ZADD', DST, 0, LETTER[after] .. key)
end
"""
    + """
-- A planned write, from ARGV[at]: write id, run key, the guard (a count, then
-- field / expected value pairs), the head (a count, then field / value
-- pairs), the body ('' keeps it), the journal change ('' none; 'r', both
-- lengths, the model entries and the tool entries; 'p', a count, then kind
-- ('m' or 't'), index and bytes of each entry, in order). Returns {answer =
-- reply} for: this write re-sent {1, lease}, no run {-1}, the guard did not
-- hold {0, 0, FIELDS}, a damaged run {2}, an entry past its journal's end {3}.
local function plan_write(at)
  local wid, key = ARGV[at], ARGV[at + 1]
  local values, head = read(RUN)
  if head.write_id == wid then return {answer = {1, head.lease_expires_at_ms}} end
  if not head.revision and redis.call('EXISTS', RUN) == 0 then return {answer = {-1}} end
  at = at + 2
  local guards = tonumber(ARGV[at])
  for i = 1, guards do
    if head[ARGV[at + 2 * i - 1]] ~= ARGV[at + 2 * i] then return {answer = {0, 0, values}} end
  end
  local whole, nm, nt = intact(RUN, head)
  if not whole then return {answer = {2}} end
  at = at + 2 * guards + 1
  local w = {key = key, sets = {'write_id', wid}, stale = {}, before = head.status}
  w.status, w.token_before, w.token = head.status, head.claim_token, head.claim_token
  for i = 1, tonumber(ARGV[at]) do
    local name, value = ARGV[at + 2 * i - 1], ARGV[at + 2 * i]
    put(w.sets, name, value)
    if name == 'status' then w.status = value end
    if name == 'claim_token' then w.token = value end
  end
  at = at + 2 * tonumber(ARGV[at]) + 1
  if ARGV[at] ~= '' then put(w.sets, 'body', ARGV[at]) end
  local journal = ARGV[at + 1]
  local function entries(kind, first, length, before)
    for i = 0, length - 1 do put(w.sets, kind .. '.' .. i, ARGV[first + i]) end
    for i = length, before - 1 do w.stale[#w.stale + 1] = kind .. '.' .. i end
    put(w.sets, kind, fmt(length))
  end
  if journal == 'r' then
    local m = tonumber(ARGV[at + 2])
    entries('jm', at + 4, m, nm)
    entries('jt', at + 4 + m, tonumber(ARGV[at + 3]), nt)
  elseif journal == 'p' then
    local lengths = {m = nm, t = nt}
    for i = 0, tonumber(ARGV[at + 2]) - 1 do
      local kind, index = ARGV[at + 3 + 3 * i], tonumber(ARGV[at + 4 + 3 * i])
      if index > lengths[kind] then return {answer = {3}} end
      put(w.sets, 'j' .. kind .. '.' .. index, ARGV[at + 5 + 3 * i])
      if index == lengths[kind] then lengths[kind] = index + 1 end
    end
    if lengths.m ~= nm then put(w.sets, 'jm', fmt(lengths.m)) end
    if lengths.t ~= nt then put(w.sets, 'jt', fmt(lengths.t)) end
  end
  if w.status ~= head.status then expect('zset', {DST}) end
  if w.token ~= w.token_before then expect('zset', {CT}) end
  w.impose = plan_impose(key, IMPOSED[w.status] or false)
  return w
end
local function apply_write(w)
  apply('HSET', RUN, w.sets)
  if #w.stale > 0 then apply('HDEL', RUN, w.stale) end
  restatus(w.key, w.before, w.status)
  reholder(RUN, w.token_before, w.token)
  apply_impose(w.key, w.impose)
  return redis.call('HGET', RUN, 'lease_expires_at_ms')
end
"""
)

#: The record scripts' functions (read, intact, reholder, plan_write, ...), for scripts
#: of other modules (needs the names they use bound first: RUN, DST, CT, ...).
RECORD_LIB: Final = _RUNS
_RUN: Final = bind("RUN DST SUM ST RS CT") + LUA_COMMON + LUA_THREADS + _RUNS

# KEYS run, all, dst, sum, st, rs, ct; ARGV write id, run key, status, claim
# token ('' none), then the hash's field / value pairs. Returns 1 (created, or
# this write's re-send) or 0 (the key exists).
LUA_CREATE: Final = (
    bind("RUN ALL DST SUM ST RS CT")
    + LUA_COMMON
    + LUA_THREADS
    + _RUNS
    + """
if redis.call('EXISTS', RUN) == 1 then
  if redis.call('HGET', RUN, 'write_id') == ARGV[1] then return 1 end
  return 0
end
expect('zset', {ALL, DST, CT})
local imposed = plan_impose(ARGV[2], IMPOSED[ARGV[3]] or false)
local items = {}
for i = 5, #ARGV do items[#items + 1] = ARGV[i] end
apply('HSET', RUN, items)
redis.call('ZADD', ALL, 0, ARGV[2])
redis.call('ZADD', DST, 0, LETTER[ARGV[3]] .. ARGV[2])
reholder(RUN, '', ARGV[4])
apply_impose(ARGV[2], imposed)
return 1
"""
)

# KEYS run, dst, sum, st, rs, ct; ARGV cycle, claim token, lease ms, recovery ('1'
# or '0'), write id, run key. The rules of leases.claim_refusal and the
# overflow checks of leases.claimed_head. Returns {1, the hash after the
# claim}, {0, now, FIELDS} (refused), {-1} (no run) or {2} (damaged).
LUA_CLAIM: Final = (
    _RUN
    + """
local values, head = read(RUN)
if head.write_id == ARGV[5] then return {1, redis.call('HGETALL', RUN)} end
if not head.revision and redis.call('EXISTS', RUN) == 0 then return {-1} end
local rev, cycle = count(head.revision), count(head.cycle_index)
local attempt = count(head.resume_attempt)
local lease = head.lease_expires_at_ms
if not (rev and cycle and attempt and (lease == '' or count(lease)) and intact(RUN, head)) then
  return {2}
end
local now = now_ms()
local recovery = tonumber(ARGV[4])
local expiry = now + tonumber(ARGV[3])
local status = head.status
if head.terminal ~= '0' or (status ~= 'running' and status ~= 'reconciliation_required')
    or cycle + 1 ~= tonumber(ARGV[1]) or (lease ~= '' and count(lease) > now)
    or (recovery == 0 and (lease ~= '' or head.ambiguous ~= '0' or status ~= 'running'))
    or rev >= MAX or attempt + recovery > MAX or expiry > MAX then
  return {0, now, values}
end
if status ~= 'running' then expect('zset', {DST}) end
expect('zset', {CT})
local imposed = plan_impose(ARGV[6], false)
redis.call('HSET', RUN, 'revision', fmt(rev + 1), 'status', 'running',
  'resume_attempt', fmt(attempt + recovery), 'claim_token', ARGV[2], 'claimed_cycle', ARGV[1],
  'lease_expires_at_ms', fmt(expiry), 'write_id', ARGV[5])
restatus(ARGV[6], status, 'running')
reholder(RUN, head.claim_token, ARGV[2])
apply_impose(ARGV[6], imposed)
return {1, redis.call('HGETALL', RUN)}
"""
)

# KEYS run; ARGV claim token, lease ms. Writes the lease field alone; a re-send
# extends the same live lease again. Returns {1, expiry}, {0, now, FIELDS}
# (refused) or {-1} (no run).
LUA_RENEW: Final = (
    bind("RUN")
    + LUA_COMMON
    + _RUNS
    + """
local values, head = read(RUN)
if not head.revision and redis.call('EXISTS', RUN) == 0 then return {-1} end
local now = now_ms()
local lease = count(head.lease_expires_at_ms)
local expiry = now + tonumber(ARGV[2])
if head.claim_token ~= ARGV[1] or not lease or lease <= now or expiry > MAX then
  return {0, now, values}
end
redis.call('HSET', RUN, 'lease_expires_at_ms', fmt(expiry))
return {1, expiry}
"""
)

# KEYS run, dst, sum, st, rs, ct; ARGV the planned write (plan_write). Returns
# {1, lease after the write} or plan_write's answer.
LUA_WRITE: Final = (
    _RUN
    + """
local w = plan_write(1)
if w.answer then return w.answer end
return {1, apply_write(w)}
"""
)

# KEYS s d idx exp sum st due rs run dst ct; ARGV step, payload, metadata tail
# (its write id is the record write's), ttl ms or '', then the planned write.
# The step must be new. Returns {1, lease} (both written, or this commit
# re-sent), {4, the step's revision} (it exists) or plan_write's answer;
# the guard is decided first, and a refusal writes nothing.
LUA_COMMIT: Final = (
    bind("S D IDX EXP SUM ST DUE RS RUN DST CT")
    + LUA_COMMON
    + LUA_THREADS
    + _RUNS
    + """
local step = plan_put(ARGV[1], ARGV[3], '0', ARGV[4], ARGV[6])
if step.answer and step.answer[1] == 1 then
  return {1, redis.call('HGET', RUN, 'lease_expires_at_ms')}
end
local w = plan_write(5)
if w.answer then return w.answer end
if step.answer then return {4, step.answer[2]} end
local lease = apply_write(w)
write_put(step, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[6])
return {1, lease}
"""
)

# KEYS s d idx exp sum st due rs run gone all dst id ev er ct (er: the event
# index of the thread's run); ARGV thread, write id, the parts to delete ('r'
# record, 'e' events, 'c' checkpoints: any of them), force ('1' or '0').
# Unless forced, a live lease on the record (server clock) refuses the
# delete: {-2}; a damaged lease {2}. Returns {record existed, events deleted,
# steps deleted}; a delete that removed a record leaves its write id and that
# answer in `gone` for a minute, so a re-send answers the same (a re-sent
# delete of checkpoints alone finds nothing more to delete).
LUA_DELETE: Final = (
    bind("S D IDX EXP SUM ST DUE RS RUN GONE ALL DST ID EV ER CT")
    + LUA_COMMON
    + LUA_THREADS
    + _RUNS
    + """
local thread, wid, parts = ARGV[1], ARGV[2], ARGV[3]
local runs, events = string.find(parts, 'r', 1, true), string.find(parts, 'e', 1, true)
local steps = string.find(parts, 'c', 1, true)
local sent = {string.match(redis.call('GET', GONE) or '', '^(%x+):(%d):(%d+):(%d+)$')}
if sent[1] == wid then return {tonumber(sent[2]), tonumber(sent[3]), tonumber(sent[4])} end
local existed, imposed, doomed, seqs, stepped, before = false, false, {}, {}, 0, false
if runs then
  existed = redis.call('EXISTS', RUN) == 1
  if existed and ARGV[4] ~= '1' then
    local lease = redis.call('HGET', RUN, 'lease_expires_at_ms')
    if lease ~= '' then
      local expiry = count(lease)
      if not expiry then return {2} end
      if expiry > now_ms() then return {-2} end
    end
  end
  expect('zset', {ALL, DST, CT})
  imposed = plan_impose(thread, false)
end
if events then
  seqs = redis.call('ZRANGE', ER, 0, -1)
  expect('hash', {ID})
  for _, seq in ipairs(seqs) do
    local found = redis.call('HMGET', EV, seq .. 'm', seq .. 'p')
    local id = string.match(found[1] or '', '^%x+:(.*)$')
    if id and string.match(redis.call('HGET', ID, id) or '', '^(%d+):') ~= seq then id = false end
    if found[2] then expect('zset', {found[2]}) end
    doomed[#doomed + 1] = {seq, id, found[2]}
  end
end
if steps then
  expect('zset', {S, IDX, EXP, ST, DUE})
  expect('hash', {D, SUM, RS})
  stepped = redis.call('ZCARD', S)
  before = redis.call('HGET', SUM, thread)
end
if runs then
  reholder(RUN, redis.call('HGET', RUN, 'claim_token'), '')
  redis.call('UNLINK', RUN)
  redis.call('ZREM', ALL, thread)
  local members = {}
  for _, letter in pairs(LETTER) do members[#members + 1] = letter .. thread end
  redis.call('ZREM', DST, unpack(members))
  apply_impose(thread, imposed)
end
for _, event in ipairs(doomed) do
  local seq, id, parent = event[1], event[2], event[3]
  redis.call('HDEL', EV, seq, seq .. 'm', seq .. 'p')
  if id then redis.call('HDEL', ID, id) end
  if parent then redis.call('ZREM', parent, seq) end
end
if events then redis.call('UNLINK', ER) end
if steps then
  redis.call('UNLINK', S, D)
  resummarize(thread, before, false)
end
local answer = {existed and 1 or 0, #seqs, stepped}
if existed then
  redis.call('SET', GONE, wid .. ':' .. table.concat(answer, ':'), 'PX', 60000)
end
return answer
"""
)

# KEYS an index, then the run of each member read from it; ARGV those members.
# Returns each run's head fields, or 0 for a member that left the index since.
LUA_HEADS: Final = f"""#!lua flags=no-writes
local HEAD = {_lua_list(HEAD_FIELDS)}
local out = {{}}
for i = 2, #KEYS do
  if redis.call('ZSCORE', KEYS[1], ARGV[i - 1]) then
    out[#out + 1] = redis.call('HMGET', KEYS[i], unpack(HEAD))
  else
    out[#out + 1] = 0
  end
end
return out
"""
