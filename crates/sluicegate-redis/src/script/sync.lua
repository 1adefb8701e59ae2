-- store.sync: one exchange of window counts (see synced/mod.rs and docs/redis.md).
-- KEYS[i]: one window's shared count, `<state key>:sync:<period µs>:<window index>`; the
-- first ARGV[1] of them have something to add, the rest are only read.
-- ARGV[2i], ARGV[2i+1] (i ≤ ARGV[1]): what this instance admitted in window KEYS[i] since
-- its last exchange, and the key's TTL in ms, set at each addition (two periods and a
-- second: a sliding window still reads the count during the next window).
-- Returns each window's fleet-wide count, this delta included, in KEYS' order. The reads
-- are one MGET: one command for all of them, not one each.
local writes = tonumber(ARGV[1])
local out = {}
for i = 1, writes do
  out[i] = redis.call('INCRBY', KEYS[i], ARGV[2 * i])
  redis.call('PEXPIRE', KEYS[i], ARGV[2 * i + 1])
end
if #KEYS > writes then
  local read = redis.call('MGET', unpack(KEYS, writes + 1))
  for j = 1, #read do
    out[writes + j] = tonumber(read[j]) or 0
  end
end
return out
