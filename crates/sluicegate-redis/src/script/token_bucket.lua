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

  -- The hot path of the common policy, so it is written out: the same steps as
  -- tokens_at, refill_time and whole, without their calls. Every operand here is below
  -- 2^52 (range.rs), where floor and ceil of a double division are exact. The refilled
  -- level is kept in st[3] for commit.
  function M.eval(q, st, now, cost)
    local limit, period = q.limit, q.period
    local cap = q.burst * period
    local tokens = cap
    if st then
      local deficit = cap - st[1]
      if deficit > 0 then
        local elapsed = now - st[2]
        if elapsed <= 0 then
          tokens = st[1]
        elseif elapsed < ceil(deficit / limit) then
          tokens = st[1] + elapsed * limit
        end
      end
      st[3] = tokens
    end
    local after = tokens - cost * period
    local reset = 0
    if cap > after then
      reset = ceil((cap - after) / limit)
    end
    -- A read (cost 0) is always admitted, even while delayed requests keep the bucket in debt.
    if after >= 0 or cost == 0 then
      local remaining = 0
      if after > 0 then
        remaining = floor(after / period)
      end
      return 1, remaining, reset, -1, 0
    end
    local wait = ceil(-after / limit)
    if q.max_delay >= 0 and wait <= q.max_delay then
      return 1, 0, reset, -1, wait
    end
    -- In delay mode the request is admitted (delayed) as soon as its wait fits the budget.
    return 0, whole(q, tokens), refill_time(q, cap - tokens), wait - max(q.max_delay, 0), 0
  end

  -- The whole decision of a request under this one policy alone (no override, no
  -- penalty), hand-inlined for speed: parse, refill, decide, write, reply, without the
  -- generic path's helper calls, tables and string splitting. The same steps as load,
  -- M.eval and M.commit above (the differential tests run both paths against the core).
  -- Rounding is written as `x + (-x) % 1` (ceil) and `x - x % 1` (floor): exact for the
  -- non-negative operands below 2^52 here, and cheaper than calling math.ceil/floor.
  -- `text` is the key's stored state or nil. Appends the item's reply to `out` after `o`
  -- and returns the new end, or nil when the generic path must decide: a state counted
  -- under other numbers (to be carried over), or a cost beyond the capacity.
  function M.fast(q, key, text, now, cost, out, o)
    local limit, period, burst = q.limit, q.period, q.burst
    if cost > burst then
      return nil
    end
    local cap = burst * period
    local tokens, last = cap, now
    if last < 1 then
      last = 1
    end
    if text then
      local t, l, sig = match(text, '^(%-?%d+) (%d+)|(.*)$')
      if sig ~= q.sig then
        return nil
      end
      t, l = tonumber(t), tonumber(l)
      if l > last then
        last = l
      end
      local deficit = cap - t
      if deficit > 0 then
        local elapsed = now - l
        local full = deficit / limit
        if elapsed <= 0 then
          tokens = t
        elseif elapsed < full + (-full) % 1 then
          tokens = t + elapsed * limit
        end
      end
    end
    local after = tokens - cost * period
    local x = (cap - after) / limit
    local reset = x + (-x) % 1 -- cap >= after whenever admitted
    if after >= 0 or cost == 0 then
      local remaining = 0
      if after > 0 then
        x = after / period
        remaining = x - x % 1
      end
      if cost > 0 then
        put_pair(key, after, last, last + reset, now, q.sig)
      end
      return short_reply(out, o, remaining, reset)
    end
    x = -after / limit
    local wait = x + (-x) % 1
    if q.max_delay >= 0 and wait <= q.max_delay then
      put_pair(key, after, last, last + reset, now, q.sig)
      return full_reply(out, o, 1, 0, reset, -1, wait, q.rlimit)
    end
    -- Denied, nothing written. In delay mode the request is admitted (delayed) as soon as
    -- its wait fits the budget.
    return full_reply(out, o, 0, whole(q, tokens), refill_time(q, cap - tokens),
      wait - max(q.max_delay, 0), 0, q.rlimit)
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
    local tokens = q.burst * q.period
    if st then
      tokens = st[3] -- refilled by eval
    end
    store(key, q, st, now, tokens - cost * q.period)
  end

  function M.refund(key, q, st, now, cost)
    if not st then
      return
    end
    store(key, q, st, now, min(tokens_at(q, st, now) + cost * q.period, q.burst * q.period))
  end

  -- Reserve then settle (core Algorithm::settle): `a` is the admission {at, estimate,
  -- remaining}. A refund is bounded by what the bucket was short of full after admission
  -- less the refill since; a charge goes into debt, at most one capacity.
  function M.settle(key, q, st, now, a, real)
    local p = q.period
    local cap = q.burst * p
    local tokens = tokens_at(q, st, now)
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
        store(key, q, st, now, min(tokens + give, cap))
      end
      return
    end
    -- Beyond two capacities the floor below decides anyway; the cap keeps products exact.
    local excess = min(real - a.estimate, 2 * q.burst)
    store(key, q, st, now, max(tokens - excess * p, min(tokens, -cap)))
  end

  -- Numbers changed (sluicegate-core TokenBucket::rescale): the used amount (capacity
  -- minus tokens, debt included) is kept (rounded up).
  function M.rescale(old, q, st, now)
    if old.period == q.period and old.limit == q.limit and old.burst == q.burst then
      return st
    end
    local used = old.burst * old.period - tokens_at(old, st, now)
    if used <= 0 then
      return nil
    end
    return { q.burst * q.period - scale_up(used, q.period, old.period), max(now, st[2], 1) }
  end

  return M
end
