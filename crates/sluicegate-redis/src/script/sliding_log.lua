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

  -- Most expired entries one call pops: the work of one script call stays bounded however
  -- large a burst left the window; the rest are skipped by a binary search and popped by
  -- later calls (or go with the key's TTL).
  local MAX_POPS = 64

  -- The index of the first entry still in the window, searched in [lo, hi] (times are
  -- non-decreasing; the last entry is known to be live).
  local function first_live(key, q, now, lo, hi)
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      local at = entry(redis.call('LINDEX', key, mid))
      if at + q.period > now then
        hi = mid
      else
        lo = mid + 1
      end
    end
    return lo
  end

  -- Summarises the entries in the window; nil for a fresh key. Entries that left the window
  -- can never count again (time only moves on); up to MAX_POPS of them are dropped. A key
  -- that is not a list (WRONGTYPE: an operator's key, an old format) is replaced.
  function M.load(key, q, now)
    local last = redis.pcall('LINDEX', key, -1)
    if type(last) == 'table' and last.err then
      redis.call('DEL', key)
      return nil
    end
    if not last then
      return nil
    end
    local last_at, last_cum = entry(last)
    if not last_cum then
      -- A list of something else: start afresh rather than fail on it forever.
      redis.call('DEL', key)
      return nil
    end
    if last_at + q.period <= now then
      -- Everything expired: UNLINK frees the list off the script's thread.
      redis.call('UNLINK', key)
      return nil
    end
    local popped = 0
    local head = redis.call('LINDEX', key, 0)
    local at, cum, cost = entry(head)
    while at + q.period <= now and popped < MAX_POPS do
      redis.call('LPOP', key) -- the key keeps its TTL: LPOP does not clear it
      popped = popped + 1
      at, cum, cost = entry(redis.call('LINDEX', key, 0))
    end
    local len = redis.call('LLEN', key)
    local first = 0
    if at + q.period <= now then
      first = first_live(key, q, now, 1, len - 1)
      at, cum, cost = entry(redis.call('LINDEX', key, first))
    end
    return { key = key, base = cum - cost, first = first, len = len, last_at = last_at, last_cum = last_cum }
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
    local lo, hi = st.first, st.len - 1
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

  -- Reserve then settle (core Algorithm::settle): the admitted entry is the last live one
  -- at or before the admission. A charge is logged as a new entry now (at most twice the
  -- limit in the window); a refund lowers the entry and the running totals after it, when
  -- at most MAX_SETTLE_SHIFT (64) entries follow it.
  function M.settle(key, q, st, now, a, real)
    if not st then
      return
    end
    local lo, hi, found = st.first, st.len - 1, -1
    while lo <= hi do
      local mid = floor((lo + hi) / 2)
      if entry(redis.call('LINDEX', key, mid)) <= a.at then
        found = mid
        lo = mid + 1
      else
        hi = mid - 1
      end
    end
    if found < 0 then
      return
    end
    if real > a.estimate then
      local take = min(real - a.estimate, max(2 * q.limit - (st.last_cum - st.base), 0))
      if take > 0 then
        M.commit(key, q, st, now, take)
      end
      return
    end
    if st.len - 1 - found > 64 then
      return
    end
    local _, _, own = entry(redis.call('LINDEX', key, found))
    local give = min(a.estimate - real, own)
    if give == 0 then
      return
    end
    for i = found, st.len - 1 do
      local at, cum, cost = entry(redis.call('LINDEX', key, i))
      if i == found then
        cost = cost - give
      end
      redis.call('LSET', key, i, fmt(at) .. ' ' .. fmt(cum - give) .. ' ' .. fmt(cost))
    end
  end
  return M
end
