-- Token bucket (sluicegate-core algorithm/token_bucket.rs).
-- Fixed point as in the core: one token is `period` units, the refill adds `limit` units a
-- microsecond. The Rust side divides limit and period by their gcd first, which changes
-- no decision and keeps the numbers small. State "tokens last"; no key is a full bucket.

local function token_bucket()
  local M = {}

  function M.load(_, _, _, text)
    return parse(text)
  end

  -- Scaled tokens at `now`, refilled and capped. The refill is compared before it is
  -- multiplied, so a long idle gap never forms a product beyond 2^53.
  local function tokens_at(q, st, now)
    local cap = q.burst * q.period
    if not st then
      return cap
    end
    local tokens, last = st[1], st[2]
    local deficit = cap - tokens
    if deficit <= 0 then
      return cap
    end
    local elapsed = now - last
    if elapsed <= 0 then
      return tokens
    end
    if elapsed >= cdiv(deficit, q.limit) then
      return cap
    end
    return tokens + elapsed * q.limit
  end

  local function refill_time(q, deficit)
    if deficit <= 0 then
      return 0
    end
    return cdiv(deficit, q.limit)
  end

  local function whole(q, scaled)
    if scaled <= 0 then
      return 0
    end
    return idiv(scaled, q.period)
  end

  function M.eval(q, st, now, cost)
    local cap = q.burst * q.period
    local tokens = tokens_at(q, st, now)
    local after = tokens - cost * q.period
    local reset = refill_time(q, cap - after)
    -- A read (cost 0) is always admitted, even while delayed requests keep the bucket in debt.
    if after >= 0 or cost == 0 then
      return 1, whole(q, after), reset, -1, 0
    end
    local wait = refill_time(q, -after)
    if q.max_delay >= 0 and wait <= q.max_delay then
      return 1, 0, reset, -1, wait
    end
    -- In delay mode the request is admitted (delayed) as soon as its wait fits the budget.
    return 0, whole(q, tokens), refill_time(q, cap - tokens), wait - max(q.max_delay, 0), 0
  end

  local function store(key, q, st, now, tokens)
    local last = now
    if st then
      last = max(now, st[2])
    end
    last = max(last, 1)
    local idle_at = last + refill_time(q, q.burst * q.period - tokens)
    put_or_forget(key, fmt(tokens) .. ' ' .. fmt(last), idle_at, now)
  end

  function M.commit(key, q, st, now, cost)
    store(key, q, st, now, tokens_at(q, st, now) - cost * q.period)
  end

  function M.refund(key, q, st, now, cost)
    if not st then
      return
    end
    store(key, q, st, now, min(tokens_at(q, st, now) + cost * q.period, q.burst * q.period))
  end

  return M
end
