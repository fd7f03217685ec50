-- FixedWindow: a line-by-line port of decideFixedWindow in algorithms.go.
-- State: hash {a = window end in µs, b = count, c = 0}.
decide[4] = function(key, p, now, n)
  local st, ok = readstate(key)
  local w = idiv(now, p.period)
  local window, count = w, 0
  if ok and stored_window(p, st.a) >= w then
    window, count = stored_window(p, st.a), st.b
  end
  local e = (window + 1) * p.period
  local allowed, retry = 0, 0
  if n > p.count then
    retry = NEVER
  elseif count + n > p.count then
    retry = e - now
  else
    allowed = 1
    count = count + n
  end
  local reset = 0
  if count > 0 then
    reset = e - now
  end
  local dec = {allowed, p.limit, math.max(0, p.count - count), retry, reset}
  if allowed == 0 or n == 0 then
    return dec
  end
  writestate(key, {a = e, b = count, c = 0}, e - now)
  return dec
end
