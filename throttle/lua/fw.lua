-- FixedWindow: a line-by-line port of decideFixedWindow in algorithms.go.
-- State: a = window end in µs, b = count, c = 0.
decide[4] = function(key, p, now, n)
  local sa, sb, _, ok = readstate(key)
  local w = floor(now / p.period)
  local window, count = w, 0
  if ok and stored_window(p, sa) >= w then
    window, count = stored_window(p, sa), sb
  end
  local e = (window + 1) * p.period
  local allowed, retry = 0, 0
  if n > p.count then
    retry = NEVER
  elseif n > 0 and count + n > p.count then
    retry = e - now
  else
    allowed = 1
    count = count + n
  end
  local reset = 0
  if count > 0 then
    reset = e - now
  end
  if allowed == 1 and n > 0 then
    writestate(key, e, count, 0, e - now)
  end
  return allowed, p.limit, max(0, p.count - count), retry, reset
end
