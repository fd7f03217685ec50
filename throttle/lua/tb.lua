-- TokenBucket: a line-by-line port of decideTokenBucket in algorithms.go.
-- State: a = tokens in units, b = last refill in µs, c = den when written.
decide[2] = function(key, p, now, n)
  local sa, sb, sc, ok = readstate(key)
  ok = ok and sc > 0
  local tokens, last = p.tau, now
  if ok then
    tokens, last = sa, sb
    if sc ~= p.den then -- written under another limit: whole µs, rounded down
      local t = floor(tokens / sc)
      if t > floor(p.tau / p.den) then
        tokens = p.tau
      else
        tokens = t * p.den
      end
    end
    tokens = min(tokens, p.tau)
    local el = now - last
    if el > 0 then
      if el > floor((p.tau - tokens) / p.den) then
        tokens = p.tau
      else
        tokens = tokens + el * p.den
      end
      last = now
    end
  end
  local allowed, limit, remaining, retry, reset, used = meter(p, p.tau - tokens, now, n)
  if allowed == 1 and n > 0 then
    writestate(key, p.tau - used, last, p.den, reset + max(0, last - now)) -- expiresAt
  end
  return allowed, limit, remaining, retry, reset
end
