"""Lua scripts of :class:`RedisStreamQueue`: each state transition is one atomic script.

Every script gets the same KEYS, in ``KEY_NAMES`` order, so the prelude can name them once.
A script that fails on a missing group (NOGROUP) does so before its first write, so the caller
may create the group and simply run it again.
"""

from __future__ import annotations

KEY_NAMES = (
    "stream",  # the task stream (consumer group lives here)
    "attempts",  # hash task -> deliveries so far
    "expiries",  # hash task -> lease expiries so far
    "errors",  # hash task -> last nack reason
    "dead",  # dead-letter stream
    "dead_index",  # hash task -> dead-letter reason (cleared by re-put or a late result)
    "outstanding",  # set of tasks put and neither resulted nor dead-lettered
    "results",  # hash task -> result JSON
    "duplicates",  # counter of dropped duplicate results
    "claim_cursor",  # XAUTOCLAIM cursor, so claims sweep the whole PEL over successive calls
    "collected",  # sorted set task -> expiry (server epoch s) of released tasks; see trim()
)

_PRELUDE = """
local STREAM, ATTEMPTS, EXPIRIES, ERRORS, DEAD, DEAD_INDEX, OUTSTANDING, RESULTS, DUPLICATES, CURSOR,
  COLLECTED = unpack(KEYS)

local function forget(t)
  redis.call('HDEL', ATTEMPTS, t)
  redis.call('HDEL', EXPIRIES, t)
  redis.call('HDEL', ERRORS, t)
end

local function fields(flat)
  local m = {}
  for i = 1, #flat, 2 do m[flat[i]] = flat[i + 1] end
  return m
end

local function bury(group, id, t, p, reason, n, now)
  redis.call('XACK', STREAM, group, id)
  redis.call('XDEL', STREAM, id)
  redis.call('XADD', DEAD, '*', 't', t, 'p', p, 'r', reason, 'n', n, 'at', now)
  redis.call('HSET', DEAD_INDEX, t, reason)
  redis.call('SREM', OUTSTANDING, t)
  forget(t)
end

-- Server time, so the collected markers of every client expire on one clock.
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end

-- Drop collected markers past their expiry, at most 1000 per call (scripts stay short; every
-- put, result and release trims, so trimming outpaces releasing). A task that still has a
-- stream entry (ATTEMPTS is set exactly while it has a delivered one) can be delivered again:
-- its marker is kept for another window instead.
local function trim(t_now, retention)
  local due = redis.call('ZRANGEBYSCORE', COLLECTED, '-inf', t_now, 'LIMIT', 0, 1000)
  for _, t in ipairs(due) do
    if redis.call('HEXISTS', ATTEMPTS, t) == 1 then
      redis.call('ZADD', COLLECTED, t_now + retention, t)
    else
      redis.call('ZREM', COLLECTED, t)
    end
  end
end

-- A delivery of a released task is dropped, not handed out: its result was collected already.
local function released(group, id, t)
  if not redis.call('ZSCORE', COLLECTED, t) then return false end
  redis.call('XACK', STREAM, group, id)
  redis.call('XDEL', STREAM, id)
  forget(t)
  return true
end

-- The lease is still ours: same owner in the PEL and no re-delivery since (same attempt).
local function owns(group, id, consumer, t, attempt)
  local p = redis.call('XPENDING', STREAM, group, id, id, 1)
  if #p == 0 or p[1][2] ~= consumer then return false end
  return tonumber(redis.call('HGET', ATTEMPTS, t) or '0') == tonumber(attempt)
end
"""

# ARGV: task, payload JSON, max_in_flight, collected retention s
PUT = _PRELUDE + """
local t = ARGV[1]
if redis.call('SISMEMBER', OUTSTANDING, t) == 1 then return {'queued', ''} end
if redis.call('HEXISTS', RESULTS, t) == 1 then return {'resulted', ''} end
trim(now(), tonumber(ARGV[4]))
if redis.call('ZSCORE', COLLECTED, t) then return {'collected', ''} end
if redis.call('SCARD', OUTSTANDING) >= tonumber(ARGV[3]) then return {'full', ''} end
forget(t)
redis.call('HDEL', DEAD_INDEX, t)
redis.call('SADD', OUTSTANDING, t)
return {'ok', redis.call('XADD', STREAM, '*', 't', t, 'p', ARGV[2])}
"""

# ARGV: group, consumer, min idle ms, count, max attempts, now (epoch s)
# Returns {delivered {id, task, payload, attempt}..., dead {task, reason, attempts}..., newest id}.
DELIVER = _PRELUDE + """
local group, consumer, want, max_attempts = ARGV[1], ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])
local out, dead = {}, {}
local claimed = redis.call('XAUTOCLAIM', STREAM, group, consumer, ARGV[3],
                           redis.call('GET', CURSOR) or '0-0', 'COUNT', want)
redis.call('SET', CURSOR, claimed[1])
for _, e in ipairs(claimed[2]) do
  local f = fields(e[2])
  if not released(group, e[1], f.t) then
    local n = redis.call('HINCRBY', ATTEMPTS, f.t, 1)
    local x = redis.call('HINCRBY', EXPIRIES, f.t, 1)
    if n > max_attempts then
      local reason = 'visibility timeout expired ' .. x .. ' times'
      local last = redis.call('HGET', ERRORS, f.t)
      if last then reason = reason .. '; last error: ' .. last end
      bury(group, e[1], f.t, f.p, reason, n - 1, ARGV[6])
      table.insert(dead, {f.t, reason, n - 1})
    else
      table.insert(out, {e[1], f.t, f.p, n})
    end
  end
end
if #out < want then
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', want - #out,
                       'STREAMS', STREAM, '>')
  if r then
    for _, e in ipairs(r[1][2]) do
      local f = fields(e[2])
      if not released(group, e[1], f.t) then
        table.insert(out, {e[1], f.t, f.p, redis.call('HINCRBY', ATTEMPTS, f.t, 1)})
      end
    end
  end
end
local newest = '0-0'
if #out == 0 then
  local last = redis.call('XREVRANGE', STREAM, '+', '-', 'COUNT', 1)
  if #last > 0 then newest = last[1][1] end
end
return {out, dead, newest}
"""

# ARGV: group, id, consumer, task, attempt
ACK = _PRELUDE + """
if not owns(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]) then return 0 end
redis.call('XACK', STREAM, ARGV[1], ARGV[2])
redis.call('XDEL', STREAM, ARGV[2])
forget(ARGV[4])
return 1
"""

# ARGV: group, id, consumer, task, attempt, reason, max attempts, now (epoch s)
# Returns 0 lease lost, 1 re-queued (a fresh entry at the tail), 2 dead-lettered.
NACK = _PRELUDE + """
local group, id, t = ARGV[1], ARGV[2], ARGV[4]
if not owns(group, id, ARGV[3], t, ARGV[5]) then return 0 end
local p = fields(redis.call('XRANGE', STREAM, id, id)[1][2]).p
redis.call('HSET', ERRORS, t, ARGV[6])
if tonumber(ARGV[5]) >= tonumber(ARGV[7]) then
  bury(group, id, t, p, ARGV[6], ARGV[5], ARGV[8])
  return 2
end
redis.call('XACK', STREAM, group, id)
redis.call('XDEL', STREAM, id)
redis.call('XADD', STREAM, '*', 't', t, 'p', p)
return 1
"""

# ARGV: group, then id, consumer, task, attempt per message. Returns 1 (renewed) or 0 per message.
# XCLAIM by the owner with min-idle 0 restarts the entry's idle time, which is what XAUTOCLAIM in
# DELIVER measures; JUSTID leaves the delivery counter alone. Checking ownership first keeps a
# late renewal from taking back an entry that expired and went to another consumer.
RENEW = _PRELUDE + """
local group, out = ARGV[1], {}
for i = 2, #ARGV, 4 do
  if owns(group, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]) then
    redis.call('XCLAIM', STREAM, group, ARGV[i + 1], 0, ARGV[i], 'JUSTID')
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
"""

# ARGV: task, result JSON, collected retention s
PUT_RESULT = _PRELUDE + """
trim(now(), tonumber(ARGV[3]))
if not redis.call('ZSCORE', COLLECTED, ARGV[1]) and redis.call('HSETNX', RESULTS, ARGV[1], ARGV[2]) == 1 then
  redis.call('SREM', OUTSTANDING, ARGV[1])
  redis.call('HDEL', DEAD_INDEX, ARGV[1])
  return 1
end
redis.call('INCR', DUPLICATES)
return 0
"""

# ARGV: group. Acked entries are deleted, so the stream holds exactly pending + in-flight.
STATS = _PRELUDE + """
local in_flight = redis.call('XPENDING', STREAM, ARGV[1])[1]
return {redis.call('XLEN', STREAM) - in_flight, in_flight, redis.call('XLEN', DEAD),
        tonumber(redis.call('GET', DUPLICATES) or '0'), redis.call('SCARD', OUTSTANDING),
        redis.call('HLEN', RESULTS), redis.call('ZCARD', COLLECTED)}
"""

# ARGV: collected retention s, task... Deletes the outcome (result, dead-letter index entry) of
# each task that has one and marks it collected; other ids are left alone. Returns how many.
# ATTEMPTS, EXPIRIES and ERRORS stay: they belong to a stream entry that may still be leased
# (a worker writes its result before it acks), and that entry's ack or retirement clears them.
RELEASE = _PRELUDE + """
local t_now, retention = now(), tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  local t = ARGV[i]
  if redis.call('HDEL', RESULTS, t) + redis.call('HDEL', DEAD_INDEX, t) > 0 then
    redis.call('ZADD', COLLECTED, t_now + retention, t)
    n = n + 1
  end
end
trim(t_now, retention)
return n
"""
