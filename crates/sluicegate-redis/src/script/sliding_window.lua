-- Sliding window counter (sluicegate-core algorithm/sliding_window.rs).
-- State "window previous current". The core compares
--   previous * (period - elapsed) + (current + cost) * period <= limit * period
-- in 128-bit integers; here the same comparison is rewritten around
-- floor(previous * elapsed / period), which `muldiv` computes exactly.

local sliding_window = {}

function sliding_window.load(key)
  return get_numbers(key)
end

local function sw_at(st, window)
  if not st then
    return 0, 0
  elseif st[1] == window then
    return st[2], st[3]
  elseif st[1] + 1 == window then
    return st[3], 0
  end
  return 0, 0
end

-- Whole requests that fit: floor((limit*p - previous*(p - e)) / p) - current, at least 0.
local function sw_fits(q, previous, current, elapsed)
  local free = q.limit - previous + muldiv(previous, elapsed, q.period)
  return max(max(free, 0) - current, 0)
end

-- Smallest elapsed time at which previous * (p - e) <= allowance * p.
local function sw_needed(q, previous, allowance)
  if previous == 0 or allowance >= previous then
    return 0
  end
  return max(q.period - muldiv(allowance, q.period, previous), 0)
end

function sliding_window.eval(q, st, now, cost)
  local p = q.period
  local window = idiv(now, p)
  local start = window * p
  local previous, current = sw_at(st, window)
  local fits = sw_fits(q, previous, current, now - start)
  local function reset_for(c)
    if c > 0 then
      return start + 2 * p - now
    elseif previous > 0 then
      return start + p - now
    end
    return 0
  end
  if cost <= fits then
    return 1, fits - cost, reset_for(current + cost), -1, 0
  end
  local retry_at
  if current + cost <= q.limit then
    retry_at = start + sw_needed(q, previous, q.limit - current - cost)
  else
    retry_at = start + p + sw_needed(q, current, q.limit - cost)
  end
  return 0, fits, reset_for(current), max(retry_at - now, 0), 0
end

local function sw_idle_at(q, window, previous, current)
  if current > 0 then
    return (window + 2) * q.period
  elseif previous > 0 then
    return (window + 1) * q.period
  end
  return 0
end

function sliding_window.commit(key, q, st, now, cost)
  local window = idiv(now, q.period)
  local previous, current = sw_at(st, window)
  current = current + cost
  put(key, { fmt(window), fmt(previous), fmt(current) }, sw_idle_at(q, window, previous, current), now)
end

function sliding_window.refund(key, q, st, now, cost)
  if not st or st[1] ~= idiv(now, q.period) then
    return
  end
  local current = max(st[3] - cost, 0)
  put_or_forget(key, { fmt(st[1]), fmt(st[2]), fmt(current) }, sw_idle_at(q, st[1], st[2], current), now)
end
