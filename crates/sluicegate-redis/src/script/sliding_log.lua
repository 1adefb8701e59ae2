-- Sliding log (sluicegate-core algorithm/sliding_log.rs): the exact answer.
-- State: a list of admitted requests, oldest first, each "at cum cost" where `cum` is the
-- running total of cost up to and including the entry. With running totals the admitted
-- cost in the window is last.cum - first.cum + first.cost, read in O(1), and the entry
-- whose expiry makes room for a denied request is found by binary search.
-- Only admitted requests are logged, so a client that keeps retrying recovers.

local function sliding_log()
  local M = {}

  local function entry(text)
    local at, cum, cost = string.match(text, '^(%S+) (%S+) (%S+)$')
    return tonumber(at), tonumber(cum), tonumber(cost)
  end

  -- Drops the entries that left the window (they can never count again: time only moves
  -- on), then summarises the rest. The key keeps its TTL: LPOP does not clear it.
  function M.load(key, q, now)
    while true do
      local head = redis.call('LINDEX', key, 0)
      if not head then
        return nil
      end
      local at, cum, cost = entry(head)
      if at + q.period > now then
        local last_at, last_cum = entry(redis.call('LINDEX', key, -1))
        return { key = key, base = cum - cost, last_at = last_at, last_cum = last_cum }
      end
      redis.call('LPOP', key)
    end
  end

  function M.eval(q, st, now, cost)
    local used = 0
    if st then
      used = st.last_cum - st.base
    end
    if used + cost <= q.limit then
      local reset = 0
      if cost > 0 then
        reset = q.period
      elseif st then
        reset = max(st.last_at + q.period - now, 0)
      end
      return 1, q.limit - used - cost, reset, -1, 0
    end
    -- The first entry whose expiry leaves room: cum >= base + used + cost - limit.
    local target = st.base + used + cost - q.limit
    local lo, hi = 0, redis.call('LLEN', st.key) - 1
    local retry = q.period
    while lo <= hi do
      local mid = floor((lo + hi) / 2)
      local at, cum = entry(redis.call('LINDEX', st.key, mid))
      if cum >= target then
        retry = at + q.period - now
        hi = mid - 1
      else
        lo = mid + 1
      end
    end
    return 0, max(q.limit - used, 0), max(st.last_at + q.period - now, 0), retry, 0
  end

  function M.commit(key, q, st, now, cost)
    local at, cum = now, cost
    if st then
      -- A clock that stepped back must not break the time order the search relies on.
      at = max(now, st.last_at)
      cum = st.last_cum + cost
    end
    redis.call('RPUSH', key, fmt(at) .. ' ' .. fmt(cum) .. ' ' .. fmt(cost))
    redis.call('PEXPIRE', key, ttl_ms(at + q.period, now))
  end

  function M.refund(key, q, st, now, cost)
    if not st then
      return
    end
    while cost > 0 do
      local back = redis.call('LINDEX', key, -1)
      if not back then
        return
      end
      local at, cum, entry_cost = entry(back)
      local take = min(entry_cost, cost)
      cost = cost - take
      if take == entry_cost then
        redis.call('RPOP', key)
      else
        redis.call('LSET', key, -1, fmt(at) .. ' ' .. fmt(cum - take) .. ' ' .. fmt(entry_cost - take))
      end
    end
    local back = redis.call('LINDEX', key, -1)
    if back then
      local at = entry(back)
      redis.call('PEXPIRE', key, ttl_ms(at + q.period, now))
    end
  end

  return M
end
