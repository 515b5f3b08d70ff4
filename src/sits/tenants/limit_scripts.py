"""The limiter's programs on the Redis side (Lua, run atomically by EVALSHA / EVAL): the per-turn batch
of admissions and settlements, and the read-only usage query the dashboard asks. The limiter that calls
them, and what each counter means: tenants/limiter.py and tenants/limit_plan.py."""

from __future__ import annotations

from sits.tenants.redis_wire import Script

# KEYS: the counters of the settlements and give-backs, then of each admission's checks, then of each
# grant's, in order. ARGV[1]: lease_ms; ARGV[2]: the settlements, each "@;" then its checks' "kind:limit;"
# (the same for every request of a plan: nothing in it is filled in per request), and the give-backs, each
# "&;" then every check of its plan; ARGV[3]: the replica's lease id prefix (a member is the prefix and a
# number); ARGV[4]: every number of the call, little-endian 64-bit integers read in order: each settlement's
# tokens delta, nano-USD delta and lease number; each give-back's rate units, tokens and nano-USD returned,
# its count of free slots and their lease numbers; then the first admission's lease number (the others
# follow it), the count of grants, each admission's tokens and nano-USD, and, with grants, the live
# replicas, the rate margin (ms), the smallest grant, and per grant its requests, slots, tokens and
# nano-USD per request and first slot's lease number. ARGV[5..]: per admission, then per grant, its checks
# ("kind:limit:amount:seed:period_end_ms;" each: kind r, t, c or b; a budget's limit -1 when soft only;
# amount 1, or T and B for the request's tokens and nano-USD). Answers one string, the admissions' then
# the grants' answers joined by "|": "1" or "1,<budget values before it>" when every check passed (and was
# taken), "0,<failed check>,<retry after ms>,<reset at ms>" when one did not (and nothing was taken); a
# grant "g<requests>:<slots>:1,<budget values after it>" or "0" (refused: nothing taken). Grants:
# tenants/credits.py.
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
local rate, tokens, nano, member, members = 0, 0, 0, '', nil
for kind, rest in string.gmatch(ARGV[2], '([@&%a])([^;]*);') do
  if kind == '@' then
    rate, tokens, nano, member, members = 0, number(), number(), prefix .. string.format('%d', number()), nil
  elseif kind == '&' then  -- a credit's give-back: what it did not use (negative: used beyond its grant)
    rate, tokens, nano, members = -number(), -number(), -number(), {}
    for i = 1, number() do members[i] = prefix .. string.format('%d', number()) end
  else
    k = k + 1
    local key = KEYS[k]
    local units = kind == 'r' and rate or tokens
    if (kind == 't' or kind == 'r') and units ~= 0 then
      local tat = tonumber(redis.call('GET', key) or '0')
      if tat < now then tat = now end
      tat = tat + units * W / tonumber(string.sub(rest, 2))
      if tat > now then
        redis.call('SET', key, string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
      else
        redis.call('DEL', key)
      end
    elseif kind == 'c' then
      if members == nil then
        redis.call('ZREM', key, member)
      elseif #members > 0 then
        redis.call('ZREM', key, unpack(members))
      end
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
-- A grant (tenants/credits.py): n requests' worth of every check and s concurrency slots, each check at
-- most its headroom / (2 x replicas) (a rate's headroom keeping `margin` ms of its minute free), all or none.
local function grant(checks, base, n, s, T, B, replicas, margin, smallest, first)
  local seen, fresh, slotted = {}, {}, false
  for i, c in ipairs(checks) do
    local kind, limit, key = c[1], c[2], KEYS[base + i]
    local fit = n
    if kind == 'r' or kind == 't' then
      local unit = kind == 'r' and 1 or T
      local tat = tonumber(redis.call('GET', key) or '0')
      if tat < now then tat = now end
      seen[i] = tat
      if unit > 0 then fit = math.floor((W - margin - (tat - now)) * limit / W / (2 * replicas) / unit) end
    elseif kind == 'c' then
      slotted = true
      local held = redis.call('ZCARD', key)
      if held + 2 * replicas * s > limit then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
        held = redis.call('ZCARD', key)
      end
      local room = math.floor((limit - held) / (2 * replicas))
      if room < s then s = room end
    else
      local held = redis.call('GET', key)
      local spent = tonumber(held or c[4])
      seen[i] = spent
      fresh[i] = not held
      if limit >= 0 and B > 0 then fit = math.floor((limit - spent) / (2 * replicas) / B) end
    end
    if fit < n then n = fit end
  end
  if n < smallest or (slotted and s < 1) then return '0' end
  local out = string.format('g%d:%d:1', n, slotted and s or 0)
  for i, c in ipairs(checks) do
    local kind, limit, key = c[1], c[2], KEYS[base + i]
    if kind == 'r' or kind == 't' then
      local tat = seen[i] + n * (kind == 'r' and 1 or T) * W / limit
      redis.call('SET', key, string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
    elseif kind == 'c' then
      local args = {}
      for j = 0, s - 1 do
        args[#args + 1] = now + lease
        args[#args + 1] = prefix .. string.format('%d', first + j)
      end
      redis.call('ZADD', key, unpack(args))
      redis.call('PEXPIRE', key, lease + 1000)
    else
      local after = seen[i] + n * B
      if not fresh[i] then
        redis.call('INCRBY', key, string.format('%.0f', n * B))
      elseif c[5] > 0 then
        redis.call('SET', key, string.format('%.0f', after), 'PX', math.max(1000, c[5] + 86400000 - now))
      else
        redis.call('SET', key, string.format('%.0f', after))
      end
      out = out .. string.format(',%.0f', after)
    end
  end
  return out
end
local answers = {}
local plans = {}  -- each plan's checks, parsed once per call: the requests of a batch mostly share theirs
local function checks_of(spec)
  local plan = plans[spec]
  if not plan then
    plan = {}
    for kind, limit, amount, seed, ends in string.gmatch(spec, '(%a):([^:]+):([^:]+):([^:]+):([^;]+);') do
      if amount ~= 'T' and amount ~= 'B' then amount = tonumber(amount) end
      plan[#plan + 1] = {kind, tonumber(limit), amount, tonumber(seed), tonumber(ends)}
    end
    plans[spec] = plan
  end
  return plan
end
local m = number()
local grants = number()
for j = 5, #ARGV - grants do
  local tokens, nano = number(), number()
  local plan = checks_of(ARGV[j])
  answers[#answers + 1] = admit(plan, k, prefix .. string.format('%d', m), tokens, nano)
  k = k + #plan
  m = m + 1
end
if grants > 0 then
  local replicas, margin, smallest = number(), number(), number()
  for j = #ARGV - grants + 1, #ARGV do
    local n, s, T, B, first = number(), number(), number(), number(), number()
    local plan = checks_of(ARGV[j])
    answers[#answers + 1] = grant(plan, k, n, s, T, B, replicas, margin, smallest, first)
    k = k + #plan
  end
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
