-- GCRA's debt (decideGCRA's first half): a = TAT in whole µs, b = TAT's
-- fraction in units.
local KIND = 1
if sc > 0 then
  local tat, rem = sa, sb
  if sc ~= den then -- written under another limit: whole µs, rounded up
    if rem > 0 then
      tat = tat + 1
    end
    rem = 0
  end
  local d = tat - now
  if d >= 0 then
    -- min(d, quo(maxDebt, den)): for a whole d, d > a / b exactly when
    -- d > ⌊a / b⌋, so the floor is only taken when it is needed.
    if d > 2251799813685248 / den then -- 2^51: maxDebt
      d = 2251799813685248 / den
      d = d - d % 1
    end
    debt = d * den + rem
  end
end
