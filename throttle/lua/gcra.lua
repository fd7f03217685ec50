-- GCRA: a line-by-line port of decideGCRA in algorithms.go (read the
-- definition there). State: a = TAT in whole µs, b = TAT's fraction in
-- units, c = den when written.
decide[1] = function(key, p, now, n)
  local sa, sb, sc, ok = readstate(key)
  ok = ok and sc > 0
  local debt = 0
  if ok then
    local tat, rem = sa, sb
    if sc ~= p.den then -- written under another limit: whole µs, rounded up
      if rem > 0 then
        tat = tat + 1
      end
      rem = 0
    end
    local d = tat - now
    if d >= 0 then
      debt = min(d, floor(MAXDEBT / p.den)) * p.den + rem
    end
  end
  local allowed, limit, remaining, retry, reset, used = meter(p, debt, now, n)
  if allowed == 1 and n > 0 then
    writestate(key, now + floor(used / p.den), used % p.den, p.den, reset)
  end
  return allowed, limit, remaining, retry, reset
end
