-- The time of every decision: the Redis server's clock, never a caller's, so gateways whose
-- clocks disagree still share one timeline.
local function script_now()
  if redis.replicate_commands then
    redis.replicate_commands() -- needed before TIME on Redis < 5; a no-op since
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
