-- Fixed window (sluicegate-core algorithm/fixed_window.rs).
-- State "window count": the window index (now / period) and the cost admitted in it.

local function fixed_window()
  local M = {}

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
    local window = idiv(now, q.period)
    local until_end = (window + 1) * q.period - now
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

  function M.commit(key, q, st, now, cost)
    local window = idiv(now, q.period)
    local count = count_in(st, window) + cost
    put(key, fmt(window) .. ' ' .. fmt(count), (window + 1) * q.period, now)
  end

  function M.refund(key, q, st, now, cost)
    if not st or st[1] ~= idiv(now, q.period) then
      return
    end
    local count = max(st[2] - cost, 0)
    local idle_at = 0
    if count > 0 then
      idle_at = (st[1] + 1) * q.period
    end
    put_or_forget(key, fmt(st[1]) .. ' ' .. fmt(count), idle_at, now)
  end

  return M
end
