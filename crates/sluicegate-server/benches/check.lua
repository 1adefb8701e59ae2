-- POST /v1/check for one of 10 000 client keys, cost 1.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local body = string.format('{"policy":"bench","key":"user-%d","cost":1}', math.random(10000))
  return wrk.format(nil, "/v1/check", nil, body)
end
