-- Token bucket (sluicegate-core algorithm/token_bucket.rs).
-- Fixed point as in the core: one token is `period` units, the refill adds `limit` units a
-- microsecond. The Rust side divides limit and period by their gcd first, which changes
-- no decision and keeps the numbers small. State "tokens last"; no key is a full bucket.

local token_bucket = {}

function token_bucket.load(key)
  return get_numbers(key)
end

local function tb_capacity(q)
  return q.burst * q.period
end

-- Scaled tokens at `now`, refilled and capped. The refill is compared before it is
-- multiplied, so a long idle gap never forms a product beyond 2^53.
local function tb_tokens(q, st, now)
  local cap = tb_capacity(q)
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

local function tb_refill_time(q, deficit)
  if deficit <= 0 then
    return 0
  end
  return cdiv(deficit, q.limit)
end

local function tb_whole(q, scaled)
  if scaled <= 0 then
    return 0
  end
  return idiv(scaled, q.period)
end

function token_bucket.eval(q, st, now, cost)
  local cap = tb_capacity(q)
  local tokens = tb_tokens(q, st, now)
  local after = tokens - cost * q.period
  local reset = tb_refill_time(q, cap - after)
  -- A read (cost 0) is always admitted, even while delayed requests keep the bucket in debt.
  if after >= 0 or cost == 0 then
    return 1, tb_whole(q, after), reset, -1, 0
  end
  local wait = tb_refill_time(q, -after)
  if q.max_delay >= 0 and wait <= q.max_delay then
    return 1, 0, reset, -1, wait
  end
  -- In delay mode the request is admitted (delayed) as soon as its wait fits the budget.
  return 0, tb_whole(q, tokens), tb_refill_time(q, cap - tokens), wait - max(q.max_delay, 0), 0
end

local function tb_store(key, q, st, now, tokens)
  local last = now
  if st then
    last = max(now, st[2])
  end
  last = max(last, 1)
  put_or_forget(key, { fmt(tokens), fmt(last) }, last + tb_refill_time(q, tb_capacity(q) - tokens), now)
end

function token_bucket.commit(key, q, st, now, cost)
  tb_store(key, q, st, now, tb_tokens(q, st, now) - cost * q.period)
end

function token_bucket.refund(key, q, st, now, cost)
  if not st then
    return
  end
  tb_store(key, q, st, now, min(tb_tokens(q, st, now) + cost * q.period, tb_capacity(q)))
end
