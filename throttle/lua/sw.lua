-- SlidingWindow: a line-by-line port of decideSlidingWindow and its
-- helpers in algorithms.go. State: a = window end in µs, b = previous
-- window's count, c = current count. The weighted count is a double
-- computed by the same IEEE operations, in the same order, as estimate().

-- trunc is Go's int64(x) conversion of a float (toward zero).
local function trunc(x)
  if x >= 0 then
    return floor(x)
  end
  return ceil(x)
end

-- sw_roll is rollSliding; it returns window, prev, curr.
local function sw_roll(p, sa, sb, sc, ok, now)
  local w = floor(now / p.period)
  local sw = stored_window(p, sa)
  if not ok or sw < w - 1 then
    return w, 0, 0
  elseif sw == w - 1 then
    return w, sc, 0
  end
  return sw, sb, sc
end

-- sw_estimate is slidingWindow.estimate.
local function sw_estimate(p, window, prev, curr, now)
  local elapsed = max(0, now - window * p.period)
  return prev * (p.period - elapsed) / p.period + curr
end

-- sw_fits is slidingWindow.fits.
local function sw_fits(p, window, prev, curr, now, n)
  return sw_estimate(p, window, prev, curr, now) + n <= p.count
end

-- sw_retry is slidingWindow.retryAfter.
local function sw_retry(p, window, prev, curr, now, n)
  local e = (window + 1) * p.period
  local at
  local room = p.count - n - curr
  if room >= 0 and prev > 0 then
    at = window * p.period + ceil(p.period - room * p.period / prev)
  elseif curr > 0 then
    at = e + ceil(p.period - (p.count - n) * p.period / curr)
  else
    at = e
  end
  local t = max(1, trunc(at) - now)
  local function fitsafter(t)
    local w2, p2, c2 = sw_roll(p, e, prev, curr, true, now + t)
    return sw_fits(p, w2, p2, c2, now + t, n)
  end
  local i = 0
  while i < 4 and not fitsafter(t) do
    t = t + 1
    i = i + 1
  end
  if not fitsafter(t) then
    return e + p.period - now -- both windows forgotten: always fits
  end
  i = 0
  while i < 4 and t > 1 and fitsafter(t - 1) do
    t = t - 1
    i = i + 1
  end
  return t
end

decide[5] = function(key, p, now, n)
  local sa, sb, sc, ok = readstate(key)
  local window, prev, curr = sw_roll(p, sa, sb, sc, ok, now)
  local est = sw_estimate(p, window, prev, curr, now)
  local allowed, retry = 0, 0
  if n > p.count then
    retry = NEVER
  elseif n > 0 and est + n > p.count then
    retry = sw_retry(p, window, prev, curr, now, n)
  else
    allowed = 1
    curr = curr + n
    est = est + n
  end
  local remaining = max(0, floor(p.count - est))
  local e = (window + 1) * p.period
  local reset = 0
  if curr > 0 then
    reset = e + p.period - now
  elseif prev > 0 then
    reset = e - now
  end
  if allowed == 1 and n > 0 then
    writestate(key, e, prev, curr, reset)
  end
  return allowed, p.limit, remaining, retry, reset
end
