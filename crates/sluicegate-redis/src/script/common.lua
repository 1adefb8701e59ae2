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
local match = string.match
-- Looked up once a call, not on every command (`redis` is a global table).
local rcall = redis.call

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

-- ceil(a * b / c) exactly, for integers a, b >= 0, 0 < c < 2^51, whose result is below
-- 2^53, even when a * b is not representable (a settled debt can take a bucket to twice
-- its capacity, and the core's arithmetic is exact): binary long multiplication keeps the
-- running product as q * c + r with r < c, so nothing exceeds 2^53.
local function scale_up(a, b, c)
  local p = a * b
  if p <= EXACT then
    return cdiv(p, c)
  end
  local bq = idiv(b, c)
  local br = b - bq * c
  local bits = {}
  local x = a
  while x > 0 do
    local bit = x % 2
    bits[#bits + 1] = bit
    x = (x - bit) / 2
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q, r = q * 2, r * 2
    if r >= c then
      q, r = q + 1, r - c
    end
    if bits[i] == 1 then
      q, r = q + bq, r + br
      if r >= c then
        q, r = q + 1, r - c
      end
    end
  end
  if r > 0 then
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

-- Set by the entry script when the caller vouches that no state key appears twice in the
-- call: nothing is read back, so the fast paths neither record nor look up their writes.
local UNIQUE = false

-- The numbers of the item being written ("limit,period,burst,zone" as the script reads
-- them), set by the entry script before each commit or refund: every string state carries
-- the numbers it was counted under after a "|", so a state met under other numbers (a
-- reload changed the policy, an override was set or removed) is carried over to them
-- (each algorithm's M.rescale) instead of misread.
local SIG = nil

-- Stores a state (space-separated integers) that expires when it is idle.
local function put(key, text, idle_at, now)
  if SIG then
    text = text .. '|' .. SIG
  end
  redis.call('SET', key, text, 'PX', ttl_ms(idle_at, now))
  WRITTEN[key] = text
end

-- Integers the fast paths write, as text, memoised for the call: in a batch they mostly
-- repeat (the script's time; a full bucket less one token; the current window; the TTL),
-- and each fmt is a C call and a new Lua string. A value met once costs one more table
-- lookup and store than fmt alone. Callers write `TEXTS[x] or text_of(x)`: no call on a hit.
local TEXTS = {}
local function text_of(x)
  local text = fmt(x)
  TEXTS[x] = text
  return text
end

-- A fast path's write (M.fast of the algorithms that have one): the state "a b|sig" (or
-- "a|sig" when `b` is nil), idle at `idle_at` (> now), the TTL rounded up as by ttl_ms:
-- the same text and TTL as put, inlined.
local function put_pair(key, a, b, idle_at, now, sig)
  local body
  if b == nil then
    body = (TEXTS[a] or text_of(a)) .. '|' .. sig
  else
    body = (TEXTS[a] or text_of(a)) .. ' ' .. (TEXTS[b] or text_of(b)) .. '|' .. sig
  end
  local ms = (idle_at - now) / 1000
  ms = ms + (-ms) % 1
  if ms < 1 then
    ms = 1
  end
  ms = ms + TTL_EXTRA_MS
  rcall('SET', key, body, 'PX', TEXTS[ms] or text_of(ms))
  if not UNIQUE then
    WRITTEN[key] = body
  end
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

-- An item's reply (see entry.lua): the short form, for an admission without delay under
-- the policy's own limit, or the full form. Each returns the new end of `out`.
local function short_reply(out, o, remaining, reset)
  out[o + 1], out[o + 2] = -1 - remaining, reset
  return o + 2
end

local function full_reply(out, o, ok, remaining, reset, retry, delay, limit)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ok, remaining, reset, retry
  out[o + 5], out[o + 6], out[o + 7] = delay, 0, limit
  return o + 7
end

-- Parses a state of one to three integers; nil for a fresh key.
local function parse(text)
  if not text then
    return nil
  end
  local a, b, c = string.match(text, '^(%S+) ?(%S*) ?(%S*)$')
  return { tonumber(a), tonumber(b), tonumber(c) }
end

-- Splits a stored state into its integers and the numbers it was counted under.
local function split_state(text)
  if not text then
    return nil, nil
  end
  local body, sig = string.match(text, '^([^|]*)|(.*)$')
  if body then
    return body, sig
  end
  return text, nil
end

-- The numbers of a SIG text, as the algorithms read a policy.
local function sig_numbers(sig)
  local l, p, b, z = string.match(sig, '^(%d+),(%d+),(%d+),(%d+)$')
  if not l then
    return nil
  end
  return { limit = tonumber(l), period = tonumber(p), burst = tonumber(b), zone = tonumber(z) }
end

local function gcd(a, b)
  while b ~= 0 do
    a, b = b, a % b
  end
  return a
end

-- The policy `q` under a key's override (sluicegate-core Policy::with_override), stored as
-- "limit burst period" in raw numbers (0: the policy's own burst or period); `q` itself
-- when there is none. A burst that followed the policy's limit follows the override's.
local function with_override(q, text)
  if not text then
    return q
  end
  local l, b, p = string.match(text, '^(%d+) (%d+) (%d+)$')
  if not l then
    return q
  end
  l, b, p = tonumber(l), tonumber(b), tonumber(p)
  if p == 0 then
    p = q.rperiod
  end
  if b == 0 then
    if q.burst == q.rlimit then
      b = l
    else
      b = q.burst
    end
  end
  local o = {
    alg = q.alg, code = q.code, shadow = q.shadow, max_delay = q.max_delay,
    penalty = q.penalty, bounds = q.bounds, zone = q.zone,
    rlimit = l, rperiod = p, burst = b, limit = l, period = p,
  }
  if q.code == 4 or q.code == 5 then
    local g = gcd(l, p)
    o.limit, o.period = l / g, p / g
  elseif q.code == 6 then
    o.limit, o.period = max(cdiv(p, l), 1), 1
  end
  o.sig = fmt(o.limit) .. ',' .. fmt(o.period) .. ',' .. fmt(o.burst) .. ',' .. fmt(o.zone)
  return o
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
