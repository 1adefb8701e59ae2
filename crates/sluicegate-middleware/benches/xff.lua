-- One of 10 000 client addresses per request, as a trusted proxy would forward them.
local i = 0
request = function()
  i = (i + 1) % 10000
  return wrk.format("GET", "/api/items",
    { ["X-Forwarded-For"] = "10.0." .. math.floor(i / 256) .. "." .. (i % 256) })
end
