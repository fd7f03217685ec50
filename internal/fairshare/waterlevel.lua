-- waterLevel is the max-min fair share (water filling) over a demand
-- histogram hist at rate: the number of claimants counted, the level (+Inf
-- when they want less than the rate together) and the rate left over then.
-- hist is a flat list as HGETALL returns it: field, count, field, count...;
-- a field is two characters (distributed's slot parity and ':') followed by
-- the bucket k of a demand 2^(k/16). Package distributed's lease script and
-- package rlqs's claim script both run it (internal/fairshare: Lua has no
-- include, so each script is a concatenation); it is made once per call.
local function waterLevel(hist, rate)
  local byBucket, list = {}, {}
  for i = 1, #hist, 2 do
    local c = tonumber(hist[i + 1])
    if c and c > 0 then
      local k = string.sub(hist[i], 3)
      local x = byBucket[k]
      if x == nil then
        x = {v = 2 ^ ((tonumber(k) or -1e9) / 16), c = 0}
        byBucket[k] = x
        list[#list + 1] = x
      end
      x.c = x.c + c
    end
  end
  table.sort(list, function(x, y) return x.v < y.v end)
  local n = 0
  for i = 1, #list do n = n + list[i].c end
  local level, remaining, m = 1 / 0, rate, n
  for i = 1, #list do
    local l = remaining / m
    if list[i].v > l then
      level = l
      break
    end
    remaining = remaining - list[i].v * list[i].c
    m = m - list[i].c
  end
  return n, level, remaining
end
