-- The token bucket's debt (decideTokenBucket's first half): tau − tokens,
-- a = tokens in units, b = last refill in µs. last is what the state
-- keeps as the last refill.
local KIND = 2
tau = unpack('<d', ARGV[1], 41) -- the sixth double
local last = now
if sc > 0 then
  local tokens = sa
  last = sb
  if sc ~= den then -- written under another limit: whole µs, rounded down
    local t = tokens / sc
    t = t - t % 1
    local full = tau / den
    full = full - full % 1
    if t > full then
      tokens = tau
    else
      tokens = t * den
    end
  end
  if tokens > tau then
    tokens = tau
  end
  local el = now - last
  if el > 0 then
    local gap = (tau - tokens) / den
    gap = gap - gap % 1
    if el > gap then
      tokens = tau
    else
      tokens = tokens + el * den
    end
    last = now
  end
  debt = tau - tokens
end
