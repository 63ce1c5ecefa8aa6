"""The Lua of a Redis store's batch claims of due runs (see :mod:`.fleet`)."""

from __future__ import annotations

from typing import Final

from agentflow.checkpoint.redis.run_scripts import RECORD_LIB
from agentflow.checkpoint.redis.scripts import LUA_COMMON, bind

__all__ = ["LUA_CLAIM_DUE"]

# KEYS ct (the holder index), then the run of each due thread, in wake order;
# ARGV write id, lease ms, scope ('any', 'definitions' or 'limited'), the
# limit ('' none), the token count and the tokens, the definition count and
# the definitions. Claims, in order, each run the rules of
# fleet.due_claim_mode admit (running, not ended, no live lease on the
# server's clock, of the scope's definitions: a run without ``df`` is of any
# but a limited one), while tokens are left and, for a limit, while fewer runs
# of the definitions hold a live lease than the limit, counted first over the
# holder index. Returns the room the tokens and the limit left, then {the
# candidate's place, recovery (0/1), the hash after} of each claim; a re-sent
# script answers the claims its write id made.
LUA_CLAIM_DUE: Final = (
    bind("CT")
    + LUA_COMMON
    + RECORD_LIB
    + """
local wid, lease_ms, scope, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local tokens = {}
for i = 1, tonumber(ARGV[5]) do tokens[i] = ARGV[5 + i] end
local at = 6 + #tokens
local ours = {}
for i = 1, tonumber(ARGV[at]) do ours[ARGV[at + i]] = true end
local now = now_ms()
expect('zset', {CT})
local claimed = {}
for i = 2, #KEYS do  -- a re-sent batch: what its first sending claimed
  local mark = redis.call('HGET', KEYS[i], 'write_id')
  if mark == wid .. ':c' or mark == wid .. ':r' then
    claimed[#claimed + 1] = {i - 1, mark == wid .. ':r' and 1 or 0, redis.call('HGETALL', KEYS[i])}
  end
end
if #claimed > 0 then return {#claimed, unpack(claimed)} end
local room = #tokens
if limit then
  local live = 0
  for _, member in ipairs(redis.call('ZRANGE', CT, 0, -1)) do
    local run = string.match(member, '^.*%z(.*)$')
    local found = redis.call('HMGET', run, 'lease_expires_at_ms', 'df')
    local lease = count(found[1])
    if lease and lease > now and found[2] and ours[found[2]] then live = live + 1 end
  end
  room = math.min(room, math.max(0, limit - live))
end
if now + lease_ms > MAX then return {0} end
for i = 2, #KEYS do
  if #claimed >= room then break end
  local run = KEYS[i]
  local _, head = read(run)
  local df = redis.call('HGET', run, 'df')
  local kept = scope == 'any' or (df and ours[df]) or (scope == 'definitions' and not df)
  local rev, cycle = count(head.revision), count(head.cycle_index)
  local attempt, lease = count(head.resume_attempt), head.lease_expires_at_ms
  if kept and rev and cycle and attempt and head.terminal == '0' and head.status == 'running'
      and (lease == '' or (count(lease) and count(lease) <= now))
      and rev < MAX and cycle < MAX and intact(run, head) then
    local recovery = (lease ~= '' or head.ambiguous ~= '0') and 1 or 0
    if attempt + recovery <= MAX then
      local token = tokens[#claimed + 1]
      local mark = wid .. (recovery == 1 and ':r' or ':c')
      redis.call('HSET', run, 'revision', fmt(rev + 1), 'resume_attempt', fmt(attempt + recovery),
        'claim_token', token, 'claimed_cycle', fmt(cycle + 1),
        'lease_expires_at_ms', fmt(now + lease_ms), 'write_id', mark)
      reholder(run, head.claim_token, token)
      claimed[#claimed + 1] = {i - 1, recovery, redis.call('HGETALL', run)}
    end
  end
end
return {room, unpack(claimed)}
"""
)
