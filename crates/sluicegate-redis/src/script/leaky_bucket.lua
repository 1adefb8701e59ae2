-- Leaky bucket (sluicegate-core algorithm/leaky_bucket.rs): a meter in reject mode, the
-- evenly spaced queue of nginx `limit_req` in delay mode. Water is fixed point: a request
-- is `period` units and `limit` units drain a microsecond (limit and period reduced by
-- their gcd on the Rust side). State "level last"; no key is an empty bucket.

local leaky_bucket = {}

function leaky_bucket.load(key)
  return get_numbers(key)
end

local function lb_level(q, st, now)
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

local function lb_drain_time(q, level)
  return cdiv(level, q.limit)
end

local function lb_room(q, level)
  return idiv(max(q.burst * q.period - level, 0), q.period)
end

function leaky_bucket.eval(q, st, now, cost)
  local cap = q.burst * q.period
  local level = lb_level(q, st, now)
  local after = level + cost * q.period
  local fits = after <= cap
  if q.max_delay >= 0 then
    -- Queue: wait for the water ahead to drain.
    local wait = 0
    if cost > 0 then
      wait = lb_drain_time(q, level)
    end
    if fits and wait <= q.max_delay then
      return 1, lb_room(q, after), lb_drain_time(q, after), -1, wait
    end
    local retry = max(lb_drain_time(q, max(after - cap, 0)), max(wait - q.max_delay, 0))
    return 0, lb_room(q, level), lb_drain_time(q, level), retry, 0
  end
  if fits then
    return 1, lb_room(q, after), lb_drain_time(q, after), -1, 0
  end
  return 0, lb_room(q, level), lb_drain_time(q, level), lb_drain_time(q, after - cap), 0
end

local function lb_store(key, q, st, now, level)
  local last = now
  if st then
    last = max(now, st[2])
  end
  put_or_forget(key, { fmt(level), fmt(last) }, last + lb_drain_time(q, level), now)
end

function leaky_bucket.commit(key, q, st, now, cost)
  lb_store(key, q, st, now, lb_level(q, st, now) + cost * q.period)
end

function leaky_bucket.refund(key, q, st, now, cost)
  if not st then
    return
  end
  lb_store(key, q, st, now, max(lb_level(q, st, now) - cost * q.period, 0))
end
