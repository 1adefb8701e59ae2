-- The settle entry point (reserve then settle): sets the real cost of one admitted request
-- in each policy it consumed from, once. Concatenated after common.lua, the algorithm files
-- and the clock (see mod.rs), like entry.lua.
--
-- KEYS[1]  the reservation's one-time marker (same hash tag as the state keys)
-- KEYS[2…] one state key per policy, in order
-- ARGV[1]  "" (the Redis server's time) or, in test builds, a caller's time in µs
-- ARGV[2]  expires_at µs: after it the reservation cannot be settled ("": no expiry and
--          no marker)
-- ARGV[3]  admitted_at µs, ARGV[4] the estimate, ARGV[5] the real cost
-- then     per policy 9 fields: algorithm (1..7), limit, period, burst (as entry.lua
--          receives them), remaining right after admission, the raw limit and period, the
--          zone tag, the number B of calendar boundaries, then B instants
-- Reply: 0 settled, 1 settled before (nothing changed), 2 expired (nothing changed).

local CONSTRUCTORS = { fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra, concurrency }

local now = script_now()
-- ARGV[2] "" settles without expiry or marker (a caller that settles once by construction).
if ARGV[2] ~= '' then
  local expires_at = tonumber(ARGV[2])
  if now >= expires_at then
    return 2
  end
  -- The marker lives until the reservation expires: a replay meanwhile finds it.
  local marked = redis.call('SET', KEYS[1], '1', 'NX', 'PX', ttl_ms(expires_at, now))
  if not marked then
    return 1
  end
end

local admitted = { at = tonumber(ARGV[3]), estimate = tonumber(ARGV[4]) }
local real = tonumber(ARGV[5])
-- States and overrides in one MGET (a sliding log, a list, reads as nil and loads itself).
local wanted = {}
for k = 2, #KEYS do
  wanted[#wanted + 1] = KEYS[k]
  wanted[#wanted + 1] = (string.gsub(KEYS[k], ':[^:]*$', ':override'))
end
local values = {}
if #wanted > 0 then
  values = redis.call('MGET', unpack(wanted))
end
local a = 6
for k = 2, #KEYS do
  local code = tonumber(ARGV[a])
  local base = {
    alg = CONSTRUCTORS[code](),
    code = code,
    shadow = false,
    limit = tonumber(ARGV[a + 1]),
    period = tonumber(ARGV[a + 2]),
    burst = tonumber(ARGV[a + 3]),
    max_delay = -1,
    penalty = 0,
    rlimit = tonumber(ARGV[a + 5]),
    rperiod = tonumber(ARGV[a + 6]),
    zone = tonumber(ARGV[a + 7]),
  }
  base.sig = ARGV[a + 1] .. ',' .. ARGV[a + 2] .. ',' .. ARGV[a + 3] .. ',' .. ARGV[a + 7]
  local item = { at = admitted.at, estimate = admitted.estimate, remaining = tonumber(ARGV[a + 4]) }
  local nb = tonumber(ARGV[a + 8])
  if nb > 0 then
    local bounds = {}
    for i = 1, nb do
      bounds[i] = tonumber(ARGV[a + 8 + i])
    end
    base.bounds = bounds
  end
  a = a + 9 + nb
  -- The key's own numbers, as entry.lua applies them; a state counted under other
  -- numbers is carried over first.
  local q = with_override(base, values[2 * (k - 1)] or nil)
  if q.alg.settle then
    local key = KEYS[k]
    local body, sig = split_state(values[2 * (k - 1) - 1] or nil)
    local st = q.alg.load(key, q, now, body)
    if st and sig and sig ~= q.sig and q.alg.rescale then
      local old = sig_numbers(sig)
      if old then
        st = q.alg.rescale(old, q, st, now)
      end
    end
    SIG = q.sig
    q.alg.settle(key, q, st, now, item, real)
  end
end
return 0
