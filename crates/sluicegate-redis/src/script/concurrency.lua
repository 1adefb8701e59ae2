-- Concurrency (sluicegate-core algorithm/concurrency.rs): at most `limit` in flight.
-- State: a sorted set of leases, member "<expires_at>:<cost>" scored by expires_at, and the
-- member "last" scored by the latest expiry the key ever gave: a new lease expires at
-- max(now + lease, last + 1), so a lease's member is never reused and a stale release
-- (ZREM of its member, see store.rs) can never free a newer lease. The policy's `period`
-- field carries the lease. The key lives until `last` passes.

local function concurrency()
  local M = {}

  -- Drops the expired leases (and "last" once it passed: it then no longer matters), then
  -- reads the rest in expiry order. A key holds at most `limit` leases.
  function M.load(key, _, now)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
    local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    if #all == 0 then
      return nil
    end
    local st = { used = 0, last = 0, leases = {} }
    for i = 1, #all, 2 do
      local member, at = all[i], tonumber(all[i + 1])
      if member == 'last' then
        st.last = at
      else
        local cost = tonumber(string.match(member, ':(%d+)$'))
        st.used = st.used + cost
        st.leases[#st.leases + 1] = { at, cost }
      end
    end
    return st
  end

  local function expiry(q, st, now)
    local at = now + q.period
    if st and st.last >= at then
      return st.last + 1
    end
    return at
  end

  local function newest(st, now)
    if st and #st.leases > 0 then
      return st.leases[#st.leases][1] - now
    end
    return 0
  end

  function M.eval(q, st, now, cost)
    local used = 0
    if st then
      used = st.used
    end
    if used + cost <= q.limit then
      if cost == 0 then
        return 1, q.limit - used, newest(st, now), -1, 0, 0
      end
      local at = expiry(q, st, now)
      return 1, q.limit - used - cost, at - now, -1, 0, at
    end
    -- Walk the leases oldest first until enough cost has expired.
    local still = used
    local retry = q.period
    for i = 1, #st.leases do
      still = still - st.leases[i][2]
      if still + cost <= q.limit then
        retry = st.leases[i][1] - now
        break
      end
    end
    return 0, max(q.limit - used, 0), newest(st, now), retry, 0, 0
  end

  function M.commit(key, q, st, now, cost)
    local at = fmt(expiry(q, st, now))
    redis.call('ZADD', key, at, at .. ':' .. fmt(cost), at, 'last')
    redis.call('PEXPIRE', key, ttl_ms(tonumber(at), now))
  end

  -- Gives back `cost` from the newest leases (core: Concurrency::refund).
  function M.refund(key, _, st, _, cost)
    if not st then
      return
    end
    local i = #st.leases
    while cost > 0 and i >= 1 do
      local at, held = st.leases[i][1], st.leases[i][2]
      local take = min(held, cost)
      cost = cost - take
      redis.call('ZREM', key, fmt(at) .. ':' .. fmt(held))
      if take < held then
        redis.call('ZADD', key, fmt(at), fmt(at) .. ':' .. fmt(held - take))
      end
      i = i - 1
    end
  end

  return M
end
