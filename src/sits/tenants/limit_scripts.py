"""The limiter's programs on the Redis side (Lua, run atomically by EVALSHA / EVAL): the per-turn batch
of admissions and settlements, and the read-only usage query the dashboard asks. The limiter that calls
them, and what each counter means: tenants/limiter.py and tenants/limit_plan.py."""

from __future__ import annotations

from sits.tenants.redis_wire import Script

# KEYS: the counters of the settlements, then of each admission's checks, in order. ARGV[1]: lease_ms;
# ARGV[2]: the settlements, each "@;" then its checks' "kind:limit;" (the same for every request of a plan:
# nothing in it is filled in per request); ARGV[3]: the replica's lease id prefix (a member is the prefix
# and a request's number); ARGV[4]: every number of the call, little-endian 64-bit integers read in order:
# each settlement's tokens delta, nano-USD delta and lease number, then the first admission's lease number
# (the others follow it) and each admission's tokens and nano-USD; then per admission its checks
# ("kind:limit:amount:seed:period_end_ms;" each: kind r, t, c or b; a budget's limit -1 when soft only;
# amount 1, or T and B for the request's tokens and nano-USD). Answers one string, the admissions' answers
# joined by "|": "1" or "1,<budget values before it>" when every check passed (and was taken),
# "0,<failed check>,<retry after ms>,<reset at ms>" when one did not (and nothing was taken).
BATCH_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local prefix = ARGV[3]
local W = 60000
local k = 0
local numbers, at = ARGV[4], 1
local function number()  -- the call's next number (little-endian 64-bit integers, in the order they are used)
  local value
  value, at = struct.unpack('<i8', numbers, at)
  return value
end
local tokens, nano, member = 0, 0, ''
for kind, rest in string.gmatch(ARGV[2], '([@%a])([^;]*);') do
  if kind == '@' then
    tokens, nano, member = number(), number(), prefix .. string.format('%d', number())
  else
    k = k + 1
    local key = KEYS[k]
    if kind == 't' and tokens ~= 0 then
      local tat = tonumber(redis.call('GET', key) or '0')
      if tat < now then tat = now end
      tat = tat + tokens * W / tonumber(string.sub(rest, 2))
      if tat > now then
        redis.call('SET', key, string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
      else
        redis.call('DEL', key)
      end
    elseif kind == 'c' then
      redis.call('ZREM', key, member)
    elseif kind == 'b' and nano ~= 0 then
      if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, string.format('%d', nano)) end
    end
  end
end
local function amount_of(c, T, B)
  local amount = c[3]
  if amount == 'T' then return T elseif amount == 'B' then return B end
  return amount
end
local function admit(checks, base, member, T, B)
  local seen, fresh = {}, {}
  for i, c in ipairs(checks) do
    local kind, limit, amount, key = c[1], c[2], amount_of(c, T, B), KEYS[base + i]
    if kind == 'r' or kind == 't' then
      local tat = tonumber(redis.call('GET', key) or '0')
      if tat < now then tat = now end
      local step = amount * W / limit
      if step > W then step = W end
      if tat + step - now > W then
        return string.format('0,%d,%d,%d', i, math.ceil(tat + step - now - W), math.ceil(tat))
      end
      seen[i] = tat
    elseif kind == 'c' then
      -- expired leases (a replica that died) are swept only when the set looks full
      if redis.call('ZCARD', key) >= limit then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
        if redis.call('ZCARD', key) >= limit then
          local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
          return string.format('0,%d,1000,%d', i, math.ceil(tonumber(first[2])))
        end
      end
    else
      local held = redis.call('GET', key)
      local spent = tonumber(held or c[4])
      if limit >= 0 and spent >= limit then
        return string.format('0,%d,%d,%d', i, c[5] > 0 and (c[5] - now) or 0, c[5])
      end
      seen[i] = spent
      fresh[i] = not held
    end
  end
  local out = '1'
  for i, c in ipairs(checks) do
    local kind, limit, amount, key = c[1], c[2], amount_of(c, T, B), KEYS[base + i]
    if kind == 'r' or kind == 't' then
      local tat = seen[i] + amount * W / limit
      redis.call('SET', key, string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
    elseif kind == 'c' then
      redis.call('ZADD', key, now + lease, member)
      redis.call('PEXPIRE', key, lease + 1000)
    else
      if not fresh[i] then  -- counted in place: its expiry stays
        redis.call('INCRBY', key, string.format('%.0f', amount))
      elseif c[5] > 0 then  -- a new period's counter, created with its expiry (a day after the period)
        redis.call('SET', key, string.format('%.0f', seen[i] + amount), 'PX', math.max(1000, c[5] + 86400000 - now))
      else
        redis.call('SET', key, string.format('%.0f', seen[i] + amount))
      end
      out = out .. string.format(',%.0f', seen[i])
    end
  end
  return out
end
local answers = {}
local plans = {}  -- each plan's checks, parsed once per call: the requests of a batch mostly share theirs
local m = number()
for j = 5, #ARGV do
  local tokens, nano = number(), number()
  local plan = plans[ARGV[j]]
  if not plan then
    plan = {}
    for kind, limit, amount, seed, ends in string.gmatch(ARGV[j], '(%a):([^:]+):([^:]+):([^:]+):([^;]+);') do
      if amount ~= 'T' and amount ~= 'B' then amount = tonumber(amount) end
      plan[#plan + 1] = {kind, tonumber(limit), amount, tonumber(seed), tonumber(ends)}
    end
    plans[ARGV[j]] = plan
  end
  answers[#answers + 1] = admit(plan, k, prefix .. string.format('%d', m), tokens, nano)
  k = k + #plan
  m = m + 1
end
return table.concat(answers, '|')
"""
BATCH = Script(BATCH_LUA)

# What counters hold now, for the dashboard (never on the request path). KEYS: the counters; ARGV[1]: their
# kinds (one letter each), ARGV[2..]: their limits. Answers one string per counter: a rate's units in use
# over the sliding minute (GCRA: how far its arrival time runs ahead of now, in units), a concurrency's
# leases alive, a budget's nano-USD (empty when Redis holds no such counter).
USAGE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i, key in ipairs(KEYS) do
  local kind = string.sub(ARGV[1], i, i)
  if kind == 'c' then
    out[i] = tostring(redis.call('ZCOUNT', key, now, '+inf'))
  elseif kind == 'b' then
    out[i] = redis.call('GET', key) or ''
  else
    local tat = tonumber(redis.call('GET', key) or '0')
    local used = 0
    if tat > now then used = (tat - now) * tonumber(ARGV[i + 1]) / 60000 end
    out[i] = string.format('%.2f', used)
  end
end
return out
"""
