-- The leaky bucket's debt (decideLeakyBucket's first half): the water,
-- a = water in units, b = last leak in µs. last is what the state keeps
-- as the last leak.
local KIND = 3
local last = now
if sc > 0 then
  local water = sa
  last = sb
  if sc ~= den then -- written under another limit: whole µs, rounded up
    local w = water / sc
    local wf = w - w % 1
    if wf < w then
      wf = wf + 1
    end
    local cap = 2251799813685248 / den -- 2^51: maxDebt
    cap = cap - cap % 1
    if wf > cap then
      water = 2251799813685248
    else
      water = wf * den
    end
  end
  local el = now - last
  if el > 0 then
    local drained = water / den
    local df = drained - drained % 1
    if df < drained then
      df = df + 1
    end
    if el >= df then
      water = 0
    else
      water = water - el * den
    end
    last = now
  end
  debt = water
end
