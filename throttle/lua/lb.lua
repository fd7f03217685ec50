-- LeakyBucket: a line-by-line port of decideLeakyBucket in algorithms.go.
-- State: a = water in units, b = last leak in µs, c = den when written.
decide[3] = function(key, p, now, n)
  local sa, sb, sc, ok = readstate(key)
  ok = ok and sc > 0
  local water, last = 0, now
  if ok then
    water, last = sa, sb
    if sc ~= p.den then -- written under another limit: whole µs, rounded up
      local w = ceil(water / sc)
      if w > floor(MAXDEBT / p.den) then
        water = MAXDEBT
      else
        water = w * p.den
      end
    end
    local el = now - last
    if el > 0 then
      if el >= ceil(water / p.den) then
        water = 0
      else
        water = water - el * p.den
      end
      last = now
    end
  end
  local allowed, limit, remaining, retry, reset, used = meter(p, water, now, n)
  if allowed == 1 and n > 0 then
    writestate(key, used, last, p.den, reset + max(0, last - now)) -- expiresAt
  end
  return allowed, limit, remaining, retry, reset
end
