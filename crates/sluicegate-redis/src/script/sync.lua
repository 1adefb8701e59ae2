-- store.sync: one exchange of window counts (see synced/mod.rs and docs/redis.md).
-- KEYS[i]: one window's shared count, `<state key>:sync:<period µs>:<window index>`.
-- ARGV[2i-1]: what this instance admitted in that window since its last exchange (0 only
-- reads); ARGV[2i]: the key's TTL in ms, set when something is added (two periods and a
-- second: a sliding window still reads the count during the next window).
-- Returns each window's fleet-wide count, this delta included.
local out = {}
for i, key in ipairs(KEYS) do
  local delta = tonumber(ARGV[2 * i - 1])
  if delta > 0 then
    out[i] = redis.call('INCRBY', key, delta)
    redis.call('PEXPIRE', key, tonumber(ARGV[2 * i]))
  else
    out[i] = tonumber(redis.call('GET', key) or '0')
  end
end
return out
