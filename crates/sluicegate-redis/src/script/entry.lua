-- The entry point: decides (or refunds) one or more requests, each under one or more
-- policies, in one atomic script call. Concatenated after common.lua and the seven algorithm
-- files (see mod.rs).
--
-- KEYS: one state key per item (a policy of a request), in order.
-- ARGV[1]  always "" in production: the time is the Redis server's (clock.lua); test
--          builds (test_clock.lua) may put a caller's time in µs here
-- ARGV[2]  "check" or "refund"
-- ARGV[3]  number of distinct policies P, then P times 7 fields:
--          algorithm (1..7), shadow (0/1), limit, period, burst, max_delay (-1: not delay mode),
--          penalty µs (0: none; see penalize in common.lua), then the number B of calendar
--          boundaries (0 unless a calendar fixed_window) and B ascending instants in µs
--          (bucket algorithms receive limit and period divided by their gcd)
-- then     the number of requests R, then per request: its number of items n, then n times
--          2 fields: policy index (1..P), cost
--
-- A request goes ahead iff every enforcing (non-shadow) item admits it; then every item
-- that admits it consumes; else nothing is consumed (sluicegate-core Verdict::combine).
-- Reply to "check": per item 6 integers: allowed (0/1), remaining, reset_after µs,
-- retry_after µs (-1: none), delay µs, lease (concurrency: when the lease the item takes
-- if the request goes ahead expires, µs since the epoch; else 0); then, once at the end,
-- the script's time in µs (a reservation records when it was admitted).

local CONSTRUCTORS = { fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra, concurrency }

local now = script_now()

-- The policies, each parsed once however many requests of the batch use it.
local built = {}
local policies = {}
local a = 4
for p = 1, tonumber(ARGV[3]) do
  local code = tonumber(ARGV[a])
  local alg = built[code]
  if not alg then
    alg = CONSTRUCTORS[code]()
    built[code] = alg
  end
  policies[p] = {
    alg = alg,
    shadow = ARGV[a + 1] == '1',
    limit = tonumber(ARGV[a + 2]),
    period = tonumber(ARGV[a + 3]),
    burst = tonumber(ARGV[a + 4]),
    max_delay = tonumber(ARGV[a + 5]),
    penalty = tonumber(ARGV[a + 6]),
  }
  local nb = tonumber(ARGV[a + 7])
  if nb > 0 then
    local bounds = {}
    for i = 1, nb do
      bounds[i] = tonumber(ARGV[a + 7 + i])
    end
    policies[p].bounds = bounds
  end
  a = a + 8 + nb
end

-- Every string state of the call in one MGET (lists, i.e. sliding logs, read as nil and
-- are loaded by their algorithm), in slices that stay within Lua's stack.
local values
if #KEYS <= 200 then
  values = redis.call('MGET', unpack(KEYS))
else
  values = {}
  for from = 1, #KEYS, 200 do
    local slice = redis.call('MGET', unpack(KEYS, from, min(from + 199, #KEYS)))
    for i = 1, #slice do
      values[from + i - 1] = slice[i]
    end
  end
end

local check = ARGV[2] == 'check'
local out = {}
local o = 0
local k = 0
-- Per-item scratch for multi-policy requests, reused by every request (only 1..n is read).
local items, costs, sts, oks = {}, {}, {}, {}
local requests = tonumber(ARGV[a])
a = a + 1
for _ = 1, requests do
  local n = tonumber(ARGV[a])
  a = a + 1
  local allowed = true
  for i = 1, n do
    local q = policies[tonumber(ARGV[a])]
    local cost = tonumber(ARGV[a + 1])
    a = a + 2
    k = k + 1
    local key = KEYS[k]
    local text = WRITTEN[key]
    if text == nil then
      text = values[k]
    end
    local st = q.alg.load(key, q, now, text)
    items[i], costs[i], sts[i] = q, cost, st
    if check then
      local ok, remaining, reset, retry, delay, lease = q.alg.eval(q, st, now, cost)
      ok, remaining, reset, retry, delay = penalize(key, q, now, ok, remaining, reset, retry, delay)
      if ok ~= 1 then
        lease = 0
      end
      oks[i] = ok == 1
      if ok ~= 1 and not q.shadow then
        allowed = false
      end
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = ok, remaining, reset, retry, delay
      out[o + 6] = lease or 0
      o = o + 6
    end
  end
  for i = 1, n do
    local cost = costs[i]
    if cost > 0 then
      local q = items[i]
      local key = KEYS[k - n + i]
      if not check then
        q.alg.refund(key, q, sts[i], now, cost)
      elseif allowed and oks[i] then
        q.alg.commit(key, q, sts[i], now, cost)
      end
    end
  end
end
out[#out + 1] = now
return out
