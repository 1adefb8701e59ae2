-- store.sync: one exchange of window counts (see synced/exchange.rs and docs/redis.md).
-- KEYS[i]: one window's shared count, `<state key>:sync:<period µs>:<window index>`; the
-- first ARGV[1] of them have something to add.
-- ARGV[2]: the counts' TTL in ms (two periods and a second), set when a count is created.
-- A count is added to only during its window and the next one (a sliding window reads the
-- previous window), so a TTL from its first addition outlives every later one: renewing it
-- at each addition was a second command per count for nothing.
-- ARGV[2 + i] (i ≤ ARGV[1]): what this instance admitted in window KEYS[i] since its last
-- exchange.
-- Returns every window's fleet-wide count (this delta included) in KEYS' order, read back
-- with one MGET, as one string of decimal counts separated by commas, an absent count
-- being 0: one bulk reply, which the client takes whole, where an array of integers cost
-- it more to parse than the rest of the exchange together.
local writes = tonumber(ARGV[1])
local ttl = ARGV[2]
for i = 1, writes do
  local delta = ARGV[2 + i]
  if redis.call('INCRBY', KEYS[i], delta) == tonumber(delta) then
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
local counts = redis.call('MGET', unpack(KEYS))
for j = 1, #counts do
  if not counts[j] then
    counts[j] = '0'
  end
end
return table.concat(counts, ',')
