-- GCRA (sluicegate-core algorithm/gcra.rs): one theoretical arrival time (TAT) per key,
-- the time at which the key is back to full. The emission interval `unit` is
-- period / limit rounded up to a whole microsecond (the Rust side computes it and sends it
-- as `limit`); the tolerance is `burst` units, so every number is an exact integer of µs.
-- State "tat".

local function gcra()
  local M = {}

  function M.load(_, _, _, text)
    return parse(text)
  end

  -- Whole requests admissible while the TAT is `ahead` µs past now.
  local function whole(q, ahead)
    return idiv(max(q.burst * q.limit - ahead, 0), q.limit)
  end

  local function ahead_of(st, now)
    if st then
      return max(st[1] - now, 0)
    end
    return 0
  end

  function M.eval(q, st, now, cost)
    local tolerance = q.burst * q.limit
    local ahead = ahead_of(st, now)
    local after = ahead + cost * q.limit
    -- A read (cost 0) is always admitted, even while delayed requests keep the TAT ahead.
    if after <= tolerance or cost == 0 then
      return 1, whole(q, after), after, -1, 0
    end
    local wait = after - tolerance
    if q.max_delay >= 0 and wait <= q.max_delay then
      return 1, 0, after, -1, wait
    end
    -- In delay mode the request is admitted (delayed) as soon as its wait fits the budget.
    return 0, whole(q, ahead), ahead, wait - max(q.max_delay, 0), 0
  end

  -- The whole decision of a request under this one policy alone (no override, no
  -- penalty), hand-inlined for speed: the same steps as load, M.eval and M.commit (the
  -- differential tests run both paths against the core), without their helper calls and
  -- tables. Returns the new end of `out` after appending the item's reply, or nil when the
  -- generic path must decide: a state counted under other numbers, or a cost beyond the
  -- burst. `x - x % 1` is floor, exact for the non-negative operands below 2^52 here.
  function M.fast(q, key, text, now, cost, out, o)
    local unit, burst = q.limit, q.burst
    if cost > burst then
      return nil
    end
    local tolerance = burst * unit
    local tat = now
    if text then
      local t, sig = match(text, '^(%d+)|(.*)$')
      if sig ~= q.sig then
        return nil
      end
      t = tonumber(t)
      if t > now then
        tat = t
      end
    end
    local ahead = tat - now
    local after = ahead + cost * unit
    if after <= tolerance or cost == 0 then
      local remaining = 0
      if tolerance > after then
        local x = (tolerance - after) / unit
        remaining = x - x % 1
      end
      if cost > 0 then
        put_pair(key, tat + cost * unit, nil, tat + cost * unit, now, q.sig)
      end
      return short_reply(out, o, remaining, after)
    end
    local wait = after - tolerance
    if q.max_delay >= 0 and wait <= q.max_delay then
      put_pair(key, tat + cost * unit, nil, tat + cost * unit, now, q.sig)
      return full_reply(out, o, 1, 0, after, -1, wait, q.rlimit)
    end
    -- Denied, nothing written. In delay mode the request is admitted (delayed) as soon as
    -- its wait fits the budget.
    return full_reply(out, o, 0, whole(q, ahead), ahead, wait - max(q.max_delay, 0), 0, q.rlimit)
  end

  function M.commit(key, q, st, now, cost)
    local tat = now
    if st then
      tat = max(st[1], now)
    end
    tat = tat + cost * q.limit
    put(key, fmt(tat), tat, now)
  end

  function M.refund(key, q, st, now, cost)
    if not st then
      return
    end
    local tat = max(st[1] - cost * q.limit, 0)
    put_or_forget(key, fmt(tat), tat, now)
  end

  -- Reserve then settle (core Algorithm::settle), in µs: a refund is bounded by how far
  -- ahead the TAT was after admission less the time since; a charge moves the TAT on, at
  -- most two tolerances past now.
  function M.settle(key, q, st, now, a, real)
    local unit = q.limit
    local tolerance = q.burst * unit
    if real < a.estimate then
      if not st then
        return
      end
      local left = max(a.estimate * unit, tolerance - (a.remaining + 1) * unit) - max(now - a.at, 0)
      local give = min((a.estimate - real) * unit, left)
      if give > 0 then
        local tat = max(st[1] - give, 0)
        put_or_forget(key, fmt(tat), tat, now)
      end
      return
    end
    local tat = 0
    if st then
      tat = st[1]
    end
    local excess = min(real - a.estimate, 2 * q.burst)
    tat = max(tat, min(max(tat, now) + excess * unit, now + 2 * tolerance))
    put_or_forget(key, fmt(tat), tat, now)
  end

  -- Numbers changed (sluicegate-core Gcra::rescale): how far the TAT is ahead, in
  -- emission intervals, is kept (rounded up).
  function M.rescale(old, q, st, now)
    if old.limit == q.limit then
      return st
    end
    local ahead = ahead_of(st, now)
    if ahead == 0 then
      return nil
    end
    return { now + scale_up(ahead, q.limit, old.limit) }
  end

  return M
end
