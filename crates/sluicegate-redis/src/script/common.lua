-- Shared by every algorithm (this file is concatenated first into the one entry script).
--
-- Lua numbers are IEEE doubles. Every integer the algorithms handle stays at or below 2^53,
-- where + - * are exact; the Rust side rejects policies whose numbers could leave that range
-- (see `range.rs`). Division is the one operation that rounds, so it is corrected here.

local floor = math.floor
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

-- floor(a * b / c) exactly, for integers a, b >= 0, 0 < c < 2^52, even when a * b is not
-- representable; the result must be below 2^53. Binary long multiplication keeps the
-- running product as q * c + r with r < c, so nothing ever exceeds 2^53.
local function muldiv(a, b, c)
  local p = a * b
  if p < EXACT then
    return idiv(p, c)
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
    q = q * 2
    r = r * 2
    if r >= c then
      q = q + 1
      r = r - c
    end
    if bits[i] == 1 then
      q = q + bq
      r = r + br
      if r >= c then
        q = q + 1
        r = r - c
      end
    end
  end
  return q
end

-- Integers as decimal text: tostring() would print 1.7e+15 and lose digits.
local function fmt(x)
  return string.format('%.0f', x)
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

-- Stores a state of space-separated integers that expires when it is idle.
local function put(key, fields, idle_at, now)
  redis.call('SET', key, table.concat(fields, ' '), 'PX', ttl_ms(idle_at, now))
end

-- Writes the state, or deletes it once it is indistinguishable from a fresh key.
local function put_or_forget(key, fields, idle_at, now)
  if idle_at <= now then
    redis.call('DEL', key)
  else
    put(key, fields, idle_at, now)
  end
end

-- Reads a state written by `put` as a list of numbers, or nil for a fresh key.
local function get_numbers(key)
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  local out = {}
  for word in string.gmatch(v, '%S+') do
    out[#out + 1] = tonumber(word)
  end
  return out
end
