-- The raw token bucket the benchmark gives redis-benchmark: the same arithmetic, state
-- format, server clock and TTL as the store's token_bucket.lua, without the dispatcher
-- (one policy, one key, no multi-policy or batch framing).
-- KEYS[1] state key; ARGV: limit, period (reduced by their gcd), burst, cost.
local floor, max = math.floor, math.max
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then return q - 1 elseif r >= b then return q + 1 end
  return q
end
local function cdiv(a, b)
  local q = idiv(a, b)
  if q * b < a then return q + 1 end
  return q
end
local function fmt(x) return string.format('%.0f', x) end
local limit, period, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cap = burst * period
local tokens, last = cap, nil
local v = redis.call('GET', KEYS[1])
if v then
  local a, b = string.match(v, '^(%S+) (%S+)$')
  local st_tokens, st_last = tonumber(a), tonumber(b)
  last = st_last
  local deficit = cap - st_tokens
  local elapsed = now - st_last
  if deficit <= 0 then tokens = cap
  elseif elapsed <= 0 then tokens = st_tokens
  elseif elapsed >= cdiv(deficit, limit) then tokens = cap
  else tokens = st_tokens + elapsed * limit end
end
local after = tokens - cost * period
if after < 0 then
  return { 0, max(idiv(max(tokens, 0), period), 0), cdiv(-after, limit) }
end
last = max(now, last or now, 1)
local ttl = max(cdiv(last + cdiv(cap - after, limit) - now, 1000), 1)
redis.call('SET', KEYS[1], fmt(after) .. ' ' .. fmt(last), 'PX', fmt(ttl))
return { 1, idiv(after, period), cdiv(cap - after, limit) }
