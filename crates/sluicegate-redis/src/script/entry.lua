-- The entry point: decides (or refunds) one or more requests, each under one or more
-- policies, in one atomic script call. Concatenated after common.lua and the six algorithm
-- files (see mod.rs).
--
-- KEYS: one state key per policy item, in order.
-- ARGV[1]  "" to read the time from the Redis server (TIME), or a test-only time in µs
-- ARGV[2]  "check" or "refund"
-- ARGV[3]  number of requests
-- then per request: the number of items n, then n times 7 fields:
--   algorithm (1..6), shadow (0/1), cost, limit, period, burst, max_delay (-1: no delay mode)
-- (bucket algorithms receive limit and period divided by their gcd).
--
-- A request goes ahead iff every enforcing (non-shadow) item admits it; then every item
-- that admits it consumes; else nothing is consumed (sluicegate-core Verdict::combine).
-- Reply to "check": per item 5 integers: allowed (0/1), remaining, reset_after µs,
-- retry_after µs (-1: none), delay µs.

local ALGORITHMS = { fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra }

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
  -- Test time runs apart from the real clock; keep the keys alive meanwhile.
  TTL_EXTRA_MS = 600000
else
  if redis.replicate_commands then
    redis.replicate_commands() -- needed before TIME on Redis < 5; a no-op since
  end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local op = ARGV[2]
local out = {}
local k = 0
local a = 4
for _ = 1, tonumber(ARGV[3]) do
  local n = tonumber(ARGV[a])
  a = a + 1
  local items = {}
  local allowed = true
  for i = 1, n do
    local item = {
      alg = ALGORITHMS[tonumber(ARGV[a])],
      shadow = ARGV[a + 1] == '1',
      cost = tonumber(ARGV[a + 2]),
      q = {
        limit = tonumber(ARGV[a + 3]),
        period = tonumber(ARGV[a + 4]),
        burst = tonumber(ARGV[a + 5]),
        max_delay = tonumber(ARGV[a + 6]),
      },
    }
    a = a + 7
    k = k + 1
    item.key = KEYS[k]
    item.st = item.alg.load(item.key, item.q, now)
    items[i] = item
    if op == 'check' then
      local ok, remaining, reset, retry, delay = item.alg.eval(item.q, item.st, now, item.cost)
      item.ok = ok == 1
      if not item.ok and not item.shadow then
        allowed = false
      end
      out[#out + 1] = ok
      out[#out + 1] = remaining
      out[#out + 1] = reset
      out[#out + 1] = retry
      out[#out + 1] = delay
    end
  end
  for i = 1, n do
    local item = items[i]
    if item.cost > 0 then
      if op == 'refund' then
        item.alg.refund(item.key, item.q, item.st, now, item.cost)
      elseif allowed and item.ok then
        item.alg.commit(item.key, item.q, item.st, now, item.cost)
      end
    end
  end
end
return out
