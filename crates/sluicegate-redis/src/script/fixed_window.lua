-- Fixed window (sluicegate-core algorithm/fixed_window.rs).
-- State "window count": the window index (now / period) and the cost admitted in it; for
-- calendar windows the window is known by the instant it ends.

local function fixed_window()
  local M = {}

  -- The window holding `now`: its id and its end. Calendar policies carry the boundaries
  -- around the gateway's time (q.bounds); the Redis clock must fall among them.
  local function window_of(q, now)
    local b = q.bounds
    if b then
      for i = 1, #b - 1 do
        if b[i] <= now and now < b[i + 1] then
          return b[i + 1], b[i + 1]
        end
      end
      error({ err = 'calendar window: the Redis clock is more than a window away from the gateway clock' })
    end
    local w = idiv(now, q.period)
    return w, (w + 1) * q.period
  end

  function M.load(_, _, _, text)
    return parse(text)
  end

  local function count_in(st, window)
    if st and st[1] == window then
      return st[2]
    end
    return 0
  end

  function M.eval(q, st, now, cost)
    local window, wend = window_of(q, now)
    local until_end = wend - now
    local count = count_in(st, window)
    if count + cost <= q.limit then
      local used = count + cost
      local reset = 0
      if used > 0 then
        reset = until_end
      end
      return 1, q.limit - used, reset, -1, 0
    end
    return 0, max(q.limit - count, 0), until_end, until_end, 0
  end

  -- The whole decision of a request under this one policy alone (no override, no
  -- penalty, not a calendar window), hand-inlined for speed: the same steps as load,
  -- M.eval and M.commit (the differential tests run both paths against the core), without
  -- their helper calls and tables. Returns the new end of `out` after appending the
  -- item's reply, or nil when the generic path must decide: a state counted under other
  -- numbers, or a cost beyond the limit. `x - x % 1` is floor, corrected as in idiv.
  function M.fast(q, key, text, now, cost, out, o)
    local limit, period = q.limit, q.period
    if cost > limit or q.bounds then
      return nil
    end
    local x = now / period
    local window = x - x % 1
    local r = now - window * period
    if r < 0 then
      window = window - 1
    elseif r >= period then
      window = window + 1
    end
    local count = 0
    if text then
      local w, c, sig = match(text, '^(%d+) (%d+)|(.*)$')
      if sig ~= q.sig then
        return nil
      end
      if tonumber(w) == window then
        count = tonumber(c)
      end
    end
    local wend = (window + 1) * period
    local used = count + cost
    if used > limit then
      return full_reply(out, o, 0, max(limit - count, 0), wend - now, wend - now, 0, q.rlimit)
    end
    local reset = 0
    if used > 0 then
      reset = wend - now
    end
    if cost > 0 then
      put_pair(key, window, used, wend, now, q.sig)
    end
    return short_reply(out, o, limit - used, reset)
  end

  function M.commit(key, q, st, now, cost)
    local window, wend = window_of(q, now)
    local count = count_in(st, window) + cost
    put(key, fmt(window) .. ' ' .. fmt(count), wend, now)
  end

  function M.refund(key, q, st, now, cost)
    local window, wend = window_of(q, now)
    if not st or st[1] ~= window then
      return
    end
    local count = max(st[2] - cost, 0)
    local idle_at = 0
    if count > 0 then
      idle_at = wend
    end
    put_or_forget(key, fmt(st[1]) .. ' ' .. fmt(count), idle_at, now)
  end

  -- Reserve then settle (core Algorithm::settle): the count changes only while the
  -- window the request was admitted in is the current one; at most twice the limit.
  function M.settle(key, q, st, now, a, real)
    local window, wend = window_of(q, now)
    local start
    if q.bounds then
      start = wend
      for i = 2, #q.bounds do
        if q.bounds[i] == wend then
          start = q.bounds[i - 1]
        end
      end
    else
      start = window * q.period
    end
    if a.at < start or a.at >= wend then
      return
    end
    local count = count_in(st, window)
    if real < a.estimate then
      count = max(count - (a.estimate - real), 0)
    else
      count = max(count, min(count + (real - a.estimate), 2 * q.limit))
    end
    local idle_at = 0
    if count > 0 then
      idle_at = wend
    end
    put_or_forget(key, fmt(window) .. ' ' .. fmt(count), idle_at, now)
  end

  -- Numbers changed (sluicegate-core FixedWindow::rescale): the count of the window still
  -- running under the old numbers moves to the window holding `now`.
  function M.rescale(old, q, st, now)
    if old.period == q.period and old.zone == q.zone then
      return st
    end
    local live
    if old.zone ~= 0 then
      live = st[1] > now
    else
      live = (st[1] + 1) * old.period > now
    end
    if not live or st[2] == 0 then
      return nil
    end
    local window = window_of(q, now)
    return { window, st[2] }
  end

  return M
end
