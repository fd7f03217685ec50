-- The write, if the request fits, and the reply (see meter_head.lua).
if debt <= room then
  -- The new state's TTL is ResetAfter = ⌈next/den⌉ µs (meter's) in whole
  -- ms rounded up, never below minttl; q = ⌊next/den⌋ and the remainder
  -- r = next % den are also GCRA's new TAT, whole and fraction.
  local nxt = debt + cost
  local q = nxt / den
  q = q - q % 1
  local r = nxt - q * den
  local ttl = q
  if r > 0 then
    ttl = q + 1
  end
  if KIND ~= 1 and last > now then
    ttl = ttl + (last - now) -- a bucket refills from last on: expiresAt
  end
  ttl = (ttl + 999) / 1000
  ttl = ttl - ttl % 1
  if ttl <= minttl then
    ttl = minttl
    if minttl == 1000 then
      ttl = '1000' -- the usual TTL, as a string: no snprintf
    end
  end
  local a, b = now + q, r -- GCRA: the TAT
  if KIND == 2 then
    a, b = tau - nxt, last -- the tokens left
  elseif KIND == 3 then
    a, b = nxt, last -- the water
  end
  -- PSETEX (SET … PX's older spelling, kept by every Redis): one
  -- argument fewer for Redis to build.
  call('PSETEX', key, ttl, pack('<ddd', a, b, den))
end
return debt
