-- GET /v1/forward-auth as nginx auth_request sends it, for one of 10 000 clients behind the
-- trusted proxy, describing a request that falls to the catch-all route.
local i = 0
request = function()
  i = (i + 1) % 10000
  return wrk.format("GET", "/v1/forward-auth", {
    ["X-Original-URI"] = "/static/app/main.js",
    ["X-Original-Method"] = "GET",
    ["X-Forwarded-For"] = "10.0." .. math.floor(i / 256) .. "." .. (i % 256),
  })
end
