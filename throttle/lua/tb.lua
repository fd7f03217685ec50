-- TokenBucket: a line-by-line port of decideTokenBucket in algorithms.go.
-- State: hash {a = tokens in units, b = last refill in µs, c = den when
-- written}.
decide[2] = function(key, p, now, n)
  local st, ok = readstate(key)
  ok = ok and st.c > 0
  local tokens, last = p.tau, now
  if ok then
    tokens, last = st.a, st.b
    if st.c ~= p.den then -- written under another limit: whole µs, rounded down
      local t = idiv(tokens, st.c)
      if t > idiv(p.tau, p.den) then
        tokens = p.tau
      else
        tokens = t * p.den
      end
    end
    tokens = math.min(tokens, p.tau)
    local el = now - last
    if el > 0 then
      if el > idiv(p.tau - tokens, p.den) then
        tokens = p.tau
      else
        tokens = tokens + el * p.den
      end
      last = now
    end
  end
  local dec, used, allowed = meter(p, p.tau - tokens, now, n)
  if not allowed or n == 0 then
    return dec
  end
  writestate(key, {a = p.tau - used, b = last, c = p.den}, dec[5])
  return dec
end
