-- SlidingWindow: a line-by-line port of decideSlidingWindow and its
-- helpers in algorithms.go. State: hash {a = window end in µs, b = previous
-- window's count, c = current count}. The weighted count is a double
-- computed by the same IEEE operations, in the same order, as estimate().

local function sw_roll(p, st, ok, now)
  local w = idiv(now, p.period)
  local sw = stored_window(p, st.a)
  if not ok or sw < w - 1 then
    return {window = w, prev = 0, curr = 0}
  elseif sw == w - 1 then
    return {window = w, prev = st.c, curr = 0}
  end
  return {window = sw, prev = st.b, curr = st.c}
end

local function sw_estimate(p, s, now)
  local elapsed = math.max(0, now - s.window * p.period)
  return s.prev * (p.period - elapsed) / p.period + s.curr
end

local function sw_fits(p, s, now, n)
  return sw_estimate(p, s, now) + n <= p.count
end

local function sw_retry(p, s, now, n)
  local e = (s.window + 1) * p.period
  local at
  local room = p.count - n - s.curr
  if room >= 0 and s.prev > 0 then
    at = s.window * p.period + math.ceil(p.period - room * p.period / s.prev)
  elseif s.curr > 0 then
    at = e + math.ceil(p.period - (p.count - n) * p.period / s.curr)
  else
    at = e
  end
  local t = math.max(1, trunc(at) - now)
  local st = {a = e, b = s.prev, c = s.curr}
  local function fitsafter(t)
    return sw_fits(p, sw_roll(p, st, true, now + t), now + t, n)
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
  local st, ok = readstate(key)
  local s = sw_roll(p, st, ok, now)
  local est = sw_estimate(p, s, now)
  local allowed, retry = 0, 0
  if n > p.count then
    retry = NEVER
  elseif est + n > p.count then
    retry = sw_retry(p, s, now, n)
  else
    allowed = 1
    s.curr = s.curr + n
    est = est + n
  end
  local remaining = math.max(0, math.floor(p.count - est))
  local e = (s.window + 1) * p.period
  local reset = 0
  if s.curr > 0 then
    reset = e + p.period - now
  elseif s.prev > 0 then
    reset = e - now
  end
  local dec = {allowed, p.limit, remaining, retry, reset}
  if allowed == 0 or n == 0 then
    return dec
  end
  writestate(key, {a = e, b = s.prev, c = s.curr}, reset)
  return dec
end
