-- LeakyBucket: a line-by-line port of decideLeakyBucket in algorithms.go.
-- State: hash {a = water in units, b = last leak in µs, c = den when
-- written}.
decide[3] = function(key, p, now, n)
  local st, ok = readstate(key)
  ok = ok and st.c > 0
  local water, last = 0, now
  if ok then
    water, last = st.a, st.b
    if st.c ~= p.den then -- written under another limit: whole µs, rounded up
      local w = ceildiv(water, st.c)
      if w > idiv(MAXDEBT, p.den) then
        water = MAXDEBT
      else
        water = w * p.den
      end
    end
    local el = now - last
    if el > 0 then
      if el >= ceildiv(water, p.den) then
        water = 0
      else
        water = water - el * p.den
      end
      last = now
    end
  end
  local dec, used, allowed = meter(p, water, now, n)
  if not allowed or n == 0 then
    return dec
  end
  writestate(key, {a = used, b = last, c = p.den}, dec[5])
  return dec
end
