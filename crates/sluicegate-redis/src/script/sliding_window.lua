-- Sliding window counter (sluicegate-core algorithm/sliding_window.rs).
-- State "window previous current". The core compares
--   previous * (period - elapsed) + (current + cost) * period <= limit * period
-- in 128-bit integers; here the same comparison is rewritten around
-- floor(previous * elapsed / period), which `muldiv` computes exactly.

local function sliding_window()
  local M = {}

  -- floor(a * b / c) exactly, for integers a, b >= 0, 0 < c < 2^52, even when a * b is not
  -- representable; the result must be below 2^53. Binary long multiplication keeps the
  -- running product as q * c + r with r < c, so nothing ever exceeds 2^53.
  local function muldiv(a, b, c)
    local p = a * b
    if p < EXACT then
      return idiv(p, c)
    end
    local bq = idiv(b, c)
    local br = b - bq * c
    local bits = {}
    local x = a
    while x > 0 do
      local bit = x % 2
      bits[#bits + 1] = bit
      x = (x - bit) / 2
    end
    local q, r = 0, 0
    for i = #bits, 1, -1 do
      q = q * 2
      r = r * 2
      if r >= c then
        q = q + 1
        r = r - c
      end
      if bits[i] == 1 then
        q = q + bq
        r = r + br
        if r >= c then
          q = q + 1
          r = r - c
        end
      end
    end
    return q
  end

  function M.load(_, _, _, text)
    return parse(text)
  end

  local function at_window(st, window)
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
  local function fits_in(q, previous, current, elapsed)
    local free = q.limit - previous + muldiv(previous, elapsed, q.period)
    return max(max(free, 0) - current, 0)
  end

  -- Smallest elapsed time at which previous * (p - e) <= allowance * p.
  local function needed(q, previous, allowance)
    if previous == 0 or allowance >= previous then
      return 0
    end
    return max(q.period - muldiv(allowance, q.period, previous), 0)
  end

  function M.eval(q, st, now, cost)
    local p = q.period
    local window = idiv(now, p)
    local start = window * p
    local previous, current = at_window(st, window)
    local fits = fits_in(q, previous, current, now - start)
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
      retry_at = start + needed(q, previous, q.limit - current - cost)
    else
      retry_at = start + p + needed(q, current, q.limit - cost)
    end
    return 0, fits, reset_for(current), max(retry_at - now, 0), 0
  end

  local function idle_at(q, window, previous, current)
    if current > 0 then
      return (window + 2) * q.period
    elseif previous > 0 then
      return (window + 1) * q.period
    end
    return 0
  end

  local function text(window, previous, current)
    return fmt(window) .. ' ' .. fmt(previous) .. ' ' .. fmt(current)
  end

  function M.commit(key, q, st, now, cost)
    local window = idiv(now, q.period)
    local previous, current = at_window(st, window)
    current = current + cost
    put(key, text(window, previous, current), idle_at(q, window, previous, current), now)
  end

  function M.refund(key, q, st, now, cost)
    if not st or st[1] ~= idiv(now, q.period) then
      return
    end
    local current = max(st[3] - cost, 0)
    put_or_forget(key, text(st[1], st[2], current), idle_at(q, st[1], st[2], current), now)
  end

  -- Reserve then settle (core Algorithm::settle): the count of the window the request
  -- was admitted in changes, the current or the previous one; at most twice the limit.
  function M.settle(key, q, st, now, a, real)
    local window = idiv(now, q.period)
    local previous, current = at_window(st, window)
    local function settled(count)
      if real < a.estimate then
        return max(count - (a.estimate - real), 0)
      end
      return max(count, min(count + (real - a.estimate), 2 * q.limit))
    end
    local back = window - idiv(a.at, q.period)
    if back <= 0 then
      current = settled(current)
    elseif back == 1 then
      previous = settled(previous)
    else
      return
    end
    put_or_forget(key, text(window, previous, current), idle_at(q, window, previous, current), now)
  end

  -- Numbers changed (sluicegate-core SlidingWindow::rescale): both counts, as they stand
  -- at `now`, move to the windows around `now`.
  function M.rescale(old, q, st, now)
    if old.period == q.period then
      return st
    end
    local previous, current = at_window(st, idiv(now, old.period))
    if previous == 0 and current == 0 then
      return nil
    end
    return { idiv(now, q.period), previous, current }
  end

  return M
end
