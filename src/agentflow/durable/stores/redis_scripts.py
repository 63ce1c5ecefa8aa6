"""The key layout of the Redis durable stores and the Lua scripts that write it.

For prefix ``P``, namespace ``N``, run key ``K`` and run id ``R`` (``b64`` is
unpadded base64url of the UTF-8 bytes, as in the checkpointer's layout)::

    P:{r.b64(N).b64(K)}:run  HASH  one run: the RunHead fields, write_id, body,
                                   jm / jt (journal lengths), jm.<i> / jt.<i> (entries)
    P:{r.b64(N).b64(K)}:gone STR   the write id of the delete that removed it (for a minute)
    P:{d.b64(N)}:all         ZSET  every run key of N, score 0 (listing BYLEX)
    P:{d.b64(N)}:st          ZSET  status letter + run key, score 0: one range per status
    P:{d.b64(N)}:v           STR   durable layout version of N
    P:{e.b64(N)}:n           STR   last event sequence of N
    P:{e.b64(N)}:id          HASH  event id -> "sequence:digest:write id"
    P:{e.b64(N)}:ev          HASH  sequence -> event bytes, sequence + "m" -> "digest:event id"
    P:{e.b64(N)}:r.b64(R)    ZSET  sequences of the events whose run_id is R (score = sequence)
    P:{e.b64(N)}:p.b64(R)    ZSET  sequences of the events whose parent_run_id is R

The tags ``r.``, ``d.`` and ``e.`` are the checkpointer's ``t.`` and ``n.``
siblings: the base64url alphabet has no ``.``, ``:`` or brace, so no run,
namespace or checkpointer key can collide with another.

Every run script compares head fields of the run's hash and writes the head,
the body and at most the journal entries it names, atomically; leases are
taken from the server's clock (``TIME``) inside the script. A script reads,
and so type-checks, every key before its first write, because Redis does not
undo the writes of a script that fails half way. Each write stores its random
write id, and a script that finds its own id already stored answers as the
write did: a driver that re-sends a script after a lost reply changes nothing.
"""

from __future__ import annotations

import base64
from dataclasses import fields
from typing import Final

from agentflow.durable.canonical import MAX_WIRE_INTEGER
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.rows import RunHead

__all__ = [
    "FIELDS",
    "HEAD_FIELDS",
    "LAYOUT_VERSION",
    "LUA_APPEND",
    "LUA_CLAIM",
    "LUA_CREATE",
    "LUA_DELETE",
    "LUA_HEADS",
    "LUA_RENEW",
    "LUA_REPLAY",
    "LUA_WRITE",
    "STATUS_LETTERS",
    "event_index",
    "event_keys",
    "namespace_keys",
    "run_key",
]

#: The durable layout this code writes, kept in ``P:{d.b64(N)}:v``.
LAYOUT_VERSION: Final = b"1"
#: The head fields of a run's hash: the fields of RunHead, by name.
HEAD_FIELDS: Final = tuple(field.name for field in fields(RunHead))
#: What a script reads of a run: its head, the last write id and both journal lengths.
FIELDS: Final = (*HEAD_FIELDS, "write_id", "jm", "jt")
#: The letter of each status in the status index.
STATUS_LETTERS: Final[dict[CheckpointStatus, bytes]] = {
    CheckpointStatus.PENDING: b"p",
    CheckpointStatus.RUNNING: b"r",
    CheckpointStatus.WAIT_USER: b"w",
    CheckpointStatus.COMPLETED: b"c",
    CheckpointStatus.FAILED: b"f",
    CheckpointStatus.MAX_CYCLES: b"m",
    CheckpointStatus.RECONCILIATION_REQUIRED: b"q",
}


def _lua_list(names: tuple[str, ...]) -> str:
    return "{" + ", ".join(f"'{name}'" for name in names) + "}"


_LETTERS = ", ".join(
    f"{status.value} = '{letter.decode()}'" for status, letter in STATUS_LETTERS.items()
)

# Refuses a key of another type before anything is written (Redis would not undo).
_MUST_BE = """local function must_be(kind, key)
  local found = redis.call('TYPE', key)['ok']
  if found ~= kind and found ~= 'none' then
    error({err = 'AGENTFLOW_CORRUPT a ' .. kind .. ' key holds a ' .. found})
  end
end
"""

# What every run script shares: the field names, the status letters, and
# readers that never trust a stored value.
_RUN_PRELUDE = f"""
local MAX = {MAX_WIRE_INTEGER}
local FIELDS = {_lua_list(FIELDS)}
local LETTER = {{{_LETTERS}}}
-- every field of a run's hash but the journal entries: FIELDS and the body
local FIXED = #FIELDS + 1
local function fmt(n) return string.format('%d', n) end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- A stored count, or nil when it is not one (the client names the damage).
local function count(text)
  if text ~= '0' and not string.match(text or '', '^[1-9]%d*$') then return nil end
  local n = tonumber(text)
  if n > MAX then return nil end
  return n
end
{_MUST_BE}-- The run's FIELDS as stored (false where missing), and by name.
local function read(run)
  local values = redis.call('HMGET', run, unpack(FIELDS))
  local head = {{}}
  for i, name in ipairs(FIELDS) do head[name] = values[i] end
  return values, head
end
-- Whether the hash holds exactly its fields and journal entries, and the journal lengths.
local function intact(run, head)
  local nm, nt = count(head.jm), count(head.jt)
  if not (nm and nt and LETTER[head.status]) then return false end
  return redis.call('HLEN', run) == FIXED + nm + nt, nm, nt
end
-- Appends a field and its value to a flat list.
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
local function restatus(st, key, before, after)
  if before == after then return end
  redis.call('ZREM', st, LETTER[before] .. key)
  redis.call('ZADD', st, 0, LETTER[after] .. key)
end
"""

# KEYS run, all, st; ARGV write id, run key, status, then the hash's field /
# value pairs. Returns 1 (created, or this write's re-send) or 0 (the key exists).
LUA_CREATE = (
    "#!lua\nlocal RUN, ALL, ST = KEYS[1], KEYS[2], KEYS[3]\n"
    + _RUN_PRELUDE
    + """
if redis.call('EXISTS', RUN) == 1 then
  if redis.call('HGET', RUN, 'write_id') == ARGV[1] then return 1 end
  return 0
end
must_be('zset', ALL)
must_be('zset', ST)
local items = {}
for i = 4, #ARGV do items[#items + 1] = ARGV[i] end
apply('HSET', RUN, items)
redis.call('ZADD', ALL, 0, ARGV[2])
redis.call('ZADD', ST, 0, LETTER[ARGV[3]] .. ARGV[2])
return 1
"""
)

# KEYS run, st; ARGV cycle, claim token, lease ms, recovery ('1' or '0'), write
# id, run key. The rules of leases.claim_refusal and the overflow checks of
# leases.claimed_head. Returns {1, the hash after the claim}, {0, now, FIELDS}
# (refused), {-1} (no run) or {2} (damaged).
LUA_CLAIM = (
    "#!lua\nlocal RUN, ST = KEYS[1], KEYS[2]\n"
    + _RUN_PRELUDE
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
if status ~= 'running' then must_be('zset', ST) end
redis.call('HSET', RUN, 'revision', fmt(rev + 1), 'status', 'running',
  'resume_attempt', fmt(attempt + recovery), 'claim_token', ARGV[2], 'claimed_cycle', ARGV[1],
  'lease_expires_at_ms', fmt(expiry), 'write_id', ARGV[5])
restatus(ST, ARGV[6], status, 'running')
return {1, redis.call('HGETALL', RUN)}
"""
)

# KEYS run; ARGV claim token, lease ms. Writes the lease field alone; a re-send
# extends the same live lease again. Returns {1, expiry}, {0, now, FIELDS}
# (refused) or {-1} (no run).
LUA_RENEW = (
    "#!lua\nlocal RUN = KEYS[1]\n"
    + _RUN_PRELUDE
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

# KEYS run, st; ARGV write id, run key, the guard (a count, then field /
# expected value pairs), the head to write (a count, then field / value pairs),
# the body ('' keeps the stored one), then the journal change: '' none; 'r'
# (replace) and both lengths, then the model entries and the tool entries;
# 'm' or 't' (one entry of that journal) and its index and bytes. Returns
# {1, lease after the write}, {0, 0, FIELDS} (the guard did not hold), {-1}
# (no run), {2} (damaged) or {3} (the entry's index is past the journal's end).
LUA_WRITE = (
    "#!lua\nlocal RUN, ST = KEYS[1], KEYS[2]\n"
    + _RUN_PRELUDE
    + """
local wid, key = ARGV[1], ARGV[2]
local values, head = read(RUN)
if head.write_id == wid then return {1, head.lease_expires_at_ms} end
if not head.revision and redis.call('EXISTS', RUN) == 0 then return {-1} end
local at = 3
local guards = tonumber(ARGV[at])
for i = 1, guards do
  if head[ARGV[at + 2 * i - 1]] ~= ARGV[at + 2 * i] then return {0, 0, values} end
end
local whole, nm, nt = intact(RUN, head)
if not whole then return {2} end
at = at + 2 * guards + 1
local sets, stale = {'write_id', wid}, {}
local status = head.status
for i = 1, tonumber(ARGV[at]) do
  local name, value = ARGV[at + 2 * i - 1], ARGV[at + 2 * i]
  put(sets, name, value)
  if name == 'status' then status = value end
end
at = at + 2 * tonumber(ARGV[at]) + 1
if ARGV[at] ~= '' then put(sets, 'body', ARGV[at]) end
local journal = ARGV[at + 1]
local function entries(kind, first, length, before)
  for i = 0, length - 1 do
    put(sets, kind .. '.' .. i, ARGV[first + i])
  end
  for i = length, before - 1 do stale[#stale + 1] = kind .. '.' .. i end
  put(sets, kind, fmt(length))
end
if journal == 'r' then
  local m, t = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  entries('jm', at + 4, m, nm)
  entries('jt', at + 4 + m, t, nt)
elseif journal ~= '' then
  local kind, index = 'j' .. journal, tonumber(ARGV[at + 2])
  local length = journal == 'm' and nm or nt
  if index > length then return {3} end
  put(sets, kind .. '.' .. index, ARGV[at + 3])
  if index == length then put(sets, kind, fmt(length + 1)) end
end
if status ~= head.status then must_be('zset', ST) end
apply('HSET', RUN, sets)
if #stale > 0 then apply('HDEL', RUN, stale) end
restatus(ST, key, head.status, status)
return {1, redis.call('HGET', RUN, 'lease_expires_at_ms')}
"""
)

# KEYS run, all, st, gone; ARGV run key, write id. Removes the run whatever its
# state (and from every status range, so a damaged status leaves no index
# entry), and leaves the write id in `gone` for a minute, for a re-send to find.
# Returns 1 if the run existed (or this delete, re-sent, removed it).
LUA_DELETE = (
    "#!lua\nlocal RUN, ALL, ST, GONE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]\n"
    + _RUN_PRELUDE
    + """
if redis.call('GET', GONE) == ARGV[2] then return 1 end
must_be('zset', ALL)
must_be('zset', ST)
local existed = redis.call('UNLINK', RUN)
redis.call('ZREM', ALL, ARGV[1])
local members = {}
for _, letter in pairs(LETTER) do members[#members + 1] = letter .. ARGV[1] end
redis.call('ZREM', ST, unpack(members))
if existed == 1 then redis.call('SET', GONE, ARGV[2], 'PX', 60000) end
return existed
"""
)

# KEYS an index, then the run of each member read from it; ARGV those members.
# Returns each run's head fields, or 0 for a member that left the index since.
LUA_HEADS = f"""#!lua flags=no-writes
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

# KEYS n, id, ev, then the run and parent indexes the event joins; ARGV event
# id, digest, event bytes, write id. Returns {1, sequence} (accepted now, or
# by this append before a re-send) or {0, what the id index holds for the id}.
LUA_APPEND = (
    """#!lua
local N, ID, EV = KEYS[1], KEYS[2], KEYS[3]
"""
    + _MUST_BE
    + """
local found = redis.call('HGET', ID, ARGV[1])
if found then
  local seq, wid = string.match(found, '^(%d+):%x+:(%x+)$')
  if wid == ARGV[4] then return {1, seq} end  -- this append, re-sent
  return {0, found}
end
must_be('string', N)
must_be('hash', EV)
for i = 4, #KEYS do must_be('zset', KEYS[i]) end
local seq = string.format('%d', redis.call('INCR', N))
redis.call('HSET', ID, ARGV[1], seq .. ':' .. ARGV[2] .. ':' .. ARGV[4])
redis.call('HSET', EV, seq, ARGV[3], seq .. 'm', ARGV[2] .. ':' .. ARGV[1])
for i = 4, #KEYS do redis.call('ZADD', KEYS[i], seq, seq) end
return {1, seq}
"""
)

# KEYS ev, a run index, and optionally a parent index; ARGV the sequence to
# read after and how many. Merges the indexes in sequence order (an event in
# both appears once) and returns sequence, event bytes, "digest:event id" of each.
LUA_REPLAY = """#!lua flags=no-writes
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


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def run_key(prefix: str, namespace: str, key: str, kind: bytes = b"run") -> bytes:
    """The hash of one run (its own hash tag), or with ``kind=b"gone"`` the
    marker a delete leaves for its re-send."""
    base = b"%s:{r.%s.%s}:" % (prefix.encode(), _b64(namespace.encode()), _b64(key.encode()))
    return base + kind


def namespace_keys(prefix: str, namespace: str) -> tuple[bytes, bytes, bytes]:
    """The namespace's run index, status index and durable layout version."""
    base = b"%s:{d.%s}:" % (prefix.encode(), _b64(namespace.encode()))
    return base + b"all", base + b"st", base + b"v"


def event_keys(prefix: str, namespace: str) -> tuple[bytes, bytes, bytes]:
    """The namespace's event sequence, id index and event data."""
    base = b"%s:{e.%s}:" % (prefix.encode(), _b64(namespace.encode()))
    return base + b"n", base + b"id", base + b"ev"


def event_index(prefix: str, namespace: str, run_id: str, *, parent: bool) -> bytes:
    """The sequences of a run's events (``parent``: of its children's events)."""
    kind = b"p" if parent else b"r"
    return b"%s:{e.%s}:%s.%s" % (
        prefix.encode(),
        _b64(namespace.encode()),
        kind,
        _b64(run_id.encode()),
    )
