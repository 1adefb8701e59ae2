-- Shared by every algorithm (this file is concatenated first into the one entry script).
-- Each algorithm file defines a constructor (`local function <name>()` returning its table
-- of functions); the entry script constructs only the algorithms a call uses, because every
-- closure defined at the top level would be created again on every call.
--
-- Lua numbers are IEEE doubles. Every integer the algorithms handle stays at or below 2^53,
-- where + - * are exact; the Rust side rejects policies whose numbers could leave that range
-- (see `range.rs`). Division is the one operation that rounds, so it is corrected here.

local floor = math.floor
local ceil = math.ceil
local max = math.max
local min = math.min
local EXACT = 9007199254740992 -- 2^53

-- floor(a / b) for integers a >= 0, b > 0, a + b <= 2^53.
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    return q - 1
  elseif r >= b then
    return q + 1
  end
  return q
end

-- ceil(a / b) for integers a >= 0, b > 0.
local function cdiv(a, b)
  local q = idiv(a, b)
  if q * b < a then
    return q + 1
  end
  return q
end

-- Integers as decimal text: tostring() would print 1.7e+15 and lose digits. Lua 5.1
-- formats %d through a C long (64 bits), exact for every integer below 2^53, and much
-- faster than %.0f.
local function fmt(x)
  return string.format('%d', x)
end

-- Set by the entry script: extra TTL while a test drives the time (see entry.lua).
local TTL_EXTRA_MS = 0

-- Milliseconds until `idle_at` (µs), rounded up, at least 1: every write gets a TTL.
local function ttl_ms(idle_at, now)
  local ms = 0
  if idle_at > now then
    ms = cdiv(idle_at - now, 1000)
  end
  return fmt(max(ms, 1) + TTL_EXTRA_MS)
end

-- String states are read for the whole call with one MGET (see entry.lua); what this call
-- writes is remembered here, so a key that appears twice in a batch is read back fresh.
-- A deleted key is remembered as false.
local WRITTEN = {}

-- Stores a state (space-separated integers) that expires when it is idle.
local function put(key, text, idle_at, now)
  redis.call('SET', key, text, 'PX', ttl_ms(idle_at, now))
  WRITTEN[key] = text
end

-- Writes the state, or deletes it once it is indistinguishable from a fresh key.
local function put_or_forget(key, text, idle_at, now)
  if idle_at <= now then
    redis.call('DEL', key)
    WRITTEN[key] = false
  else
    put(key, text, idle_at, now)
  end
end

-- Parses a state of one to three integers; nil for a fresh key.
local function parse(text)
  if not text then
    return nil
  end
  local a, b, c = string.match(text, '^(%S+) ?(%S*) ?(%S*)$')
  return { tonumber(a), tonumber(b), tonumber(c) }
end

-- Penalties (sluicegate-core penalty.rs): a denial by a policy with a penalty starts one,
-- kept in "<state key>:penalty" (same hash tag, so the same Cluster slot) as its end in µs,
-- expiring with it. While it runs, the key is denied with remaining 0 and retry_after
-- (and reset_after) at least the time left; requests meanwhile do not extend it. A policy
-- without a penalty reads nothing (removing the penalty lifts the running ones).
local function penalize(key, q, now, ok, remaining, reset, retry, delay)
  if q.penalty == 0 then
    return ok, remaining, reset, retry, delay
  end
  local pkey = key .. ':penalty'
  local blocked_until = 0
  local text = redis.call('GET', pkey)
  if text then
    blocked_until = tonumber(text) or 0
  end
  local left
  if blocked_until > now then
    left = blocked_until - now
  elseif ok == 1 then
    return ok, remaining, reset, retry, delay
  else
    left = q.penalty
    redis.call('SET', pkey, fmt(now + left), 'PX', ttl_ms(now + left, now))
  end
  return 0, 0, max(reset, left), max(retry, left, 1), 0
end
