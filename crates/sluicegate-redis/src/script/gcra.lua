-- GCRA (sluicegate-core algorithm/gcra.rs): one theoretical arrival time (TAT) per key,
-- the time at which the key is back to full. Admission is exact:
--   (now - tat) * limit + burst * period >= cost * period
-- with limit and period reduced by their gcd on the Rust side. State "tat".

local function gcra()
  local M = {}

  function M.load(_, _, _, text)
    return parse(text)
  end

  local function interval(q, cost)
    return cdiv(cost * q.period, q.limit)
  end

  local function whole(q, allowance)
    if allowance <= 0 then
      return 0
    end
    return min(idiv(allowance, q.period), q.burst)
  end

  local function tat_of(st)
    if st then
      return st[1]
    end
    return 0
  end

  function M.eval(q, st, now, cost)
    local start = max(tat_of(st), now)
    local full = q.burst * q.period
    local allowance = full - (start - now) * q.limit
    local need = cost * q.period
    local new_tat = start + interval(q, cost)
    -- A read (cost 0) is always admitted, even while delayed requests keep the TAT ahead.
    if need <= allowance or cost == 0 then
      local left = full - (new_tat - now) * q.limit
      return 1, whole(q, left), new_tat - now, -1, 0
    end
    local wait = cdiv(need - allowance, q.limit)
    if q.max_delay >= 0 and wait <= q.max_delay then
      return 1, 0, new_tat - now, -1, wait
    end
    -- In delay mode the request is admitted (delayed) as soon as its wait fits the budget.
    return 0, whole(q, allowance), start - now, wait - max(q.max_delay, 0), 0
  end

  function M.commit(key, q, st, now, cost)
    local tat = max(tat_of(st), now) + interval(q, cost)
    put(key, fmt(tat), tat, now)
  end

  function M.refund(key, q, st, now, cost)
    if not st then
      return
    end
    local tat = max(tat_of(st) - interval(q, cost), 0)
    put_or_forget(key, fmt(tat), tat, now)
  end

  return M
end
