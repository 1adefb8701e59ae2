-- Leaky bucket (sluicegate-core algorithm/leaky_bucket.rs): a meter in reject mode, the
-- evenly spaced queue of nginx `limit_req` in delay mode. Water is fixed point: a request
-- is `period` units and `limit` units drain a microsecond (limit and period reduced by
-- their gcd on the Rust side). State "level last"; no key is an empty bucket.

local function leaky_bucket()
  local M = {}

  function M.load(_, _, _, text)
    return parse(text)
  end

  local function level_at(q, st, now)
    if not st then
      return 0
    end
    local level, last = st[1], st[2]
    if level <= 0 then
      return 0
    end
    local elapsed = now - last
    if elapsed <= 0 then
      return level
    end
    if elapsed >= cdiv(level, q.limit) then
      return 0
    end
    return level - elapsed * q.limit
  end

  local function drain_time(q, level)
    return cdiv(level, q.limit)
  end

  local function room(q, level)
    return idiv(max(q.burst * q.period - level, 0), q.period)
  end

  function M.eval(q, st, now, cost)
    local cap = q.burst * q.period
    local level = level_at(q, st, now)
    local after = level + cost * q.period
    local fits = after <= cap
    if q.max_delay >= 0 then
      -- Queue: wait for the water ahead to drain.
      local wait = 0
      if cost > 0 then
        wait = drain_time(q, level)
      end
      if fits and wait <= q.max_delay then
        return 1, room(q, after), drain_time(q, after), -1, wait
      end
      local retry = max(drain_time(q, max(after - cap, 0)), max(wait - q.max_delay, 0))
      return 0, room(q, level), drain_time(q, level), retry, 0
    end
    if fits then
      return 1, room(q, after), drain_time(q, after), -1, 0
    end
    return 0, room(q, level), drain_time(q, level), drain_time(q, after - cap), 0
  end

  local function store(key, q, st, now, level)
    local last = now
    if st then
      last = max(now, st[2])
    end
    put_or_forget(key, fmt(level) .. ' ' .. fmt(last), last + drain_time(q, level), now)
  end

  function M.commit(key, q, st, now, cost)
    store(key, q, st, now, level_at(q, st, now) + cost * q.period)
  end

  function M.refund(key, q, st, now, cost)
    if not st then
      return
    end
    store(key, q, st, now, max(level_at(q, st, now) - cost * q.period, 0))
  end

  -- Reserve then settle (core Algorithm::settle): a refund is bounded by the water
  -- poured by admission less what drained since; a charge pours, up to twice the bucket.
  function M.settle(key, q, st, now, a, real)
    local p = q.period
    local cap = q.burst * p
    local level = level_at(q, st, now)
    if real < a.estimate then
      if not st then
        return
      end
      local short = max(a.estimate * p, cap - (a.remaining + 1) * p)
      local elapsed = max(now - a.at, 0)
      if elapsed >= cdiv(short, q.limit) then
        return
      end
      local give = min((a.estimate - real) * p, short - elapsed * q.limit)
      if give > 0 then
        store(key, q, st, now, max(level - give, 0))
      end
      return
    end
    local excess = min(real - a.estimate, 2 * q.burst)
    store(key, q, st, now, max(level, min(level + excess * p, 2 * cap)))
  end

  -- Numbers changed (sluicegate-core LeakyBucket::rescale): the water is kept (rounded up).
  function M.rescale(old, q, st, now)
    if old.period == q.period and old.limit == q.limit then
      return st
    end
    local level = level_at(old, st, now)
    if level <= 0 then
      return nil
    end
    return { scale_up(level, q.period, old.period), max(now, st[2]) }
  end

  return M
end
