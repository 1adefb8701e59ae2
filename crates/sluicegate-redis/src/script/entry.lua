-- The entry point: decides (or refunds) one or more requests, each under one or more
-- policies, in one atomic script call. Concatenated after common.lua and the seven algorithm
-- files (see mod.rs).
--
-- KEYS: one state key per item (a policy of a request), in order; then, when ARGV[2] has
--       "+", the store's override flag (`<prefix>!overrides`, see below).
-- ARGV[1]  always "" in production: the time is the Redis server's (clock.lua); test
--          builds (test_clock.lua) may put a caller's time in µs here
-- ARGV[2]  "check" or "refund", then "+" when the last KEY is the flag, then "!" when no
--          state key appears twice in the call (the caller checked: see UNIQUE in common.lua)
-- ARGV[3]  number of distinct policies P, then P times 10 fields:
--          algorithm (1..7), shadow (0/1), limit, period, burst, max_delay (-1: not delay mode),
--          penalty µs (0: none; see penalize in common.lua), the raw limit and period (as
--          configured, for overrides), the zone tag (0, or for calendar windows a hash of
--          the time zone), then the number B of calendar
--          boundaries (0 unless a calendar fixed_window) and B ascending instants in µs
--          (bucket algorithms receive limit and period divided by their gcd)
-- then     the number of requests R, then U: 0, or for a uniform call (every request one
--          item of one policy and cost) that policy's index (1..P) followed by the cost;
--          unless uniform, per request: its number of items n, then n times 2 fields:
--          policy index (1..P), cost
--
-- A request goes ahead iff every enforcing (non-shadow) item admits it; then every item
-- that admits it consumes; else nothing is consumed (sluicegate-core Verdict::combine).
-- Reply to "check": per item either the full form, 7 integers: allowed (0/1), remaining,
-- reset_after µs, retry_after µs (-1: none), delay µs, lease (concurrency: when the lease
-- the item takes if the request goes ahead expires, µs since the epoch; else 0), and the
-- limit that applied (the key's override's, else the policy's); or the short form of an
-- admission without delay, lease or override (the fast paths' common answer), 2 integers:
-- -1 - remaining (negative, which tells it apart), reset_after µs. Then, once at the end,
-- the script's time in µs (a reservation records when it was admitted).
--
-- Overrides: a key's own numbers under a policy live in "<state key without its
-- algorithm tag>:override" (same hash tag, so the same slot), read in the same MGET as
-- the states (see with_override in common.lua). The flag, when sent, says whether any
-- override can exist: "0" once the store has found none (overrides.rs, index), set
-- to "1" before any override is written, never back; absent (not yet indexed, flushed):
-- read them. With "0" the overrides are not read at all: half the keys of the MGET.

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
  local q = {
    alg = alg,
    code = code,
    shadow = ARGV[a + 1] == '1',
    limit = tonumber(ARGV[a + 2]),
    period = tonumber(ARGV[a + 3]),
    burst = tonumber(ARGV[a + 4]),
    max_delay = tonumber(ARGV[a + 5]),
    penalty = tonumber(ARGV[a + 6]),
    rlimit = tonumber(ARGV[a + 7]),
    rperiod = tonumber(ARGV[a + 8]),
    zone = tonumber(ARGV[a + 9]),
  }
  q.sig = ARGV[a + 2] .. ',' .. ARGV[a + 3] .. ',' .. ARGV[a + 4] .. ',' .. ARGV[a + 9]
  -- A penalty needs its own key read: such policies always take the generic path.
  if q.penalty == 0 then
    q.fast = alg.fast
  end
  policies[p] = q
  local nb = tonumber(ARGV[a + 10])
  if nb > 0 then
    local bounds = {}
    for i = 1, nb do
      bounds[i] = tonumber(ARGV[a + 10 + i])
    end
    q.bounds = bounds
  end
  a = a + 11 + nb
end

-- The state keys: every KEY but the flag, if one was sent.
local op, marks = match(ARGV[2], '^(%a+)(.*)$')
local nkeys = #KEYS
local flagged = string.find(marks, '+', 1, true) ~= nil
if flagged then
  nkeys = nkeys - 1
end
UNIQUE = string.find(marks, '!', 1, true) ~= nil

-- Reads `wanted` with MGET into `values` from index `at` on, in slices that stay within
-- Lua's stack (lists, i.e. sliding logs, read as nil and are loaded by their algorithm).
local function mget_into(values, at, wanted)
  for from = 1, #wanted, 200 do
    local slice = rcall('MGET', unpack(wanted, from, min(from + 199, #wanted)))
    for i = 1, #slice do
      values[at + from + i - 2] = slice[i]
    end
  end
end

-- Every string state of the call, and every key's override unless the flag rules them out:
-- values[i] is KEYS[i]'s state, values[nkeys + i] its override. Without a flag, states and
-- overrides share one MGET; with one, the states and the flag come first, then the
-- overrides only if the flag is not "0".
local wanted = {}
for i = 1, nkeys do
  wanted[i] = KEYS[i]
end
local values = {}
local overrides = true
if flagged then
  wanted[nkeys + 1] = KEYS[nkeys + 1]
  mget_into(values, 1, wanted)
  overrides = values[nkeys + 1] ~= '0'
  values[nkeys + 1] = nil
  wanted = {}
end
if overrides then
  local at = #wanted
  for i = 1, nkeys do
    -- Every algorithm tag is two characters (keys.rs): cheaper than a pattern substitution.
    wanted[at + i] = string.sub(KEYS[i], 1, -3) .. 'override'
  end
  mget_into(values, nkeys - at + 1, wanted)
end

local check = op == 'check'
local out = {}
local o = 0
local k = 0
-- Per-item scratch for multi-policy requests, reused by every request (only 1..n is read).
local items, costs, sts, oks, carried = {}, {}, {}, {}, {}

-- Decides (or refunds) one request of `n` items with every algorithm's general steps:
-- overrides, states counted under other numbers, penalties, several policies at once.
-- `uq` and `ucost`: the policy and cost of a uniform call's one item, else nil (read from
-- ARGV).
local function generic(n, uq, ucost)
  local allowed = true
  for i = 1, n do
    k = k + 1
    local p, cost = uq, ucost
    if not p then
      p, cost = policies[tonumber(ARGV[a])], tonumber(ARGV[a + 1])
      a = a + 2
    end
    local q = with_override(p, values[nkeys + k] or nil)
    local key = KEYS[k]
    local text = WRITTEN[key]
    if text == nil then
      text = values[k]
    end
    local body, sig = split_state(text or nil)
    local st = q.alg.load(key, q, now, body)
    carried[i] = false
    if st and sig and sig ~= q.sig and q.alg.rescale then
      local old = sig_numbers(sig)
      if old then
        st = q.alg.rescale(old, q, st, now)
        carried[i] = st ~= nil
      end
    end
    items[i], costs[i], sts[i] = q, cost, st
    if check then
      local ok, remaining, reset, retry, delay, lease
      local capacity = q.limit
      if q.code >= 4 and q.code <= 6 then
        capacity = q.burst
      end
      if cost > capacity then
        -- Over the capacity of the key's override (the request was checked against the
        -- policy's): never admissible for this key; denied, the state as a read sees it
        -- (sluicegate-core StoreShard::evaluate).
        ok, remaining, reset = q.alg.eval(q, st, now, 0)
        ok, retry, delay, lease = 0, max(reset, 1), 0, 0
      else
        ok, remaining, reset, retry, delay, lease = q.alg.eval(q, st, now, cost)
      end
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
      out[o + 7] = q.rlimit
      o = o + 7
    end
  end
  for i = 1, n do
    local cost = costs[i]
    local q = items[i]
    local key = KEYS[k - n + i]
    SIG = q.sig
    if cost > 0 and not check then
      q.alg.refund(key, q, sts[i], now, cost)
    elseif cost > 0 and allowed and oks[i] then
      q.alg.commit(key, q, sts[i], now, cost)
    elseif carried[i] and check then
      -- A state carried over to new numbers is written back under them at once, with the
      -- TTL they give it: the old numbers' TTL may end before the state does.
      q.alg.commit(key, q, sts[i], now, 0)
    end
  end
end

-- The requests. A uniform call (every request one item of the same policy and cost, the
-- common batch) sends that policy and cost once instead of per request.
local requests = tonumber(ARGV[a])
local uq = policies[tonumber(ARGV[a + 1])]
local ucost = nil
if uq then
  ucost = tonumber(ARGV[a + 2])
  a = a + 3
else
  a = a + 2
end
for _ = 1, requests do
  local n, q, cost = 1, uq, ucost
  if not uq then
    n = tonumber(ARGV[a])
    a = a + 1
    if n == 1 then
      q, cost = policies[tonumber(ARGV[a])], tonumber(ARGV[a + 1])
    end
  end
  -- A request under one policy, without an override, takes its algorithm's hand-inlined
  -- path when it has one (M.fast); that path hands back anything unusual (nil).
  local fast = check and n == 1 and q.fast
  local done = nil
  if fast and not values[nkeys + k + 1] then
    local key = KEYS[k + 1]
    local text = values[k + 1]
    if not UNIQUE then
      local written = WRITTEN[key]
      if written ~= nil then
        text = written
      end
    end
    done = fast(q, key, text or nil, now, cost, out, o)
  end
  if done then
    o, k = done, k + 1
    if not uq then
      a = a + 2
    end
  else
    generic(n, uq, ucost)
  end
end
out[#out + 1] = now
return out
