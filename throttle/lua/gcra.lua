-- GCRA: a line-by-line port of decideGCRA in algorithms.go (read the
-- definition there). State: hash {a = TAT in whole µs, b = TAT's fraction
-- in units, c = den when written}.
decide[1] = function(key, p, now, n)
  local st, ok = readstate(key)
  ok = ok and st.c > 0
  local debt = 0
  if ok then
    local tat, rem = st.a, st.b
    if st.c ~= p.den then -- written under another limit: whole µs, rounded up
      if rem > 0 then
        tat = tat + 1
      end
      rem = 0
    end
    local d = tat - now
    if d >= 0 then
      debt = math.min(d, idiv(MAXDEBT, p.den)) * p.den + rem
    end
  end
  local dec, used, allowed = meter(p, debt, now, n)
  if not allowed or n == 0 then
    return dec
  end
  writestate(key, {a = now + idiv(used, p.den), b = used % p.den, c = p.den}, dec[5])
  return dec
end
