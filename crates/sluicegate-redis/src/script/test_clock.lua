-- Test builds only (the `test-util` feature; never in a release binary): ARGV[1], when not
-- empty, is the caller's time in µs, so differential tests can drive Redis and the
-- in-memory store on one manual clock. Appended after clock.lua, it wraps script_now.
local server_now = script_now
script_now = function()
  if ARGV[1] == '' then
    return server_now()
  end
  -- Test time runs apart from the real clock; keep the keys alive meanwhile.
  TTL_EXTRA_MS = 600000
  return tonumber(ARGV[1])
end
