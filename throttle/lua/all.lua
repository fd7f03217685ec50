-- Several requests as one step (AllowAll): decideAll of the MemoryStore.
-- KEYS[i]: check i's key. ARGV: now (µs; negative: Redis TIME), commit
-- (1: count all if all allow; 0: decide without counting), then 9
-- arguments per check: alg, n and its 7 params, then the TTL floor in ms.
-- Reply: 5 integers per check, as one.lua's.
--
-- The checks are decided in order against the view, so two checks of one
-- key see each other. If all allow (and commit), the view is written.
-- Otherwise nothing is, and each decision keeps its outcome and wait but
-- reports its key's stored state (Remaining, ResetAfter of a peek).
-- flush writes every changed key of AllowAll's view.
local function flush()
  for key, v in pairs(view) do
    if v.dirty and v.log then
      writelog(key, v)
    elseif v.dirty then
      setstate(key, v.a, v.b, v.c, v.ttl)
    end
  end
end


MINTTL = tonumber(ARGV[#ARGV])
local now = clocknow(ARGV[1])
local commit = ARGV[2] == '1'
local checks = {}
for i = 1, #KEYS do
  local j = 3 + (i - 1) * 9
  local f = decide[tonumber(ARGV[j])]
  if f == nil then
    fail('algorithm ' .. tostring(ARGV[j]) .. ' is not in this script')
  end
  checks[i] = {f = f, n = tonumber(ARGV[j + 1]), p = readparams(ARGV, j + 2)}
end
view = {}
local out, all = {}, true
for i, c in ipairs(checks) do
  out[i] = {c.f(KEYS[i], c.p, now, c.n)}
  all = all and out[i][1] == 1
end
if all and commit then
  flush()
else
  view = {}
  for i, c in ipairs(checks) do
    local _, _, remaining, _, reset = c.f(KEYS[i], c.p, now, 0)
    out[i][3], out[i][5] = remaining, reset
  end
end
local flat = {}
for _, d in ipairs(out) do
  for _, x in ipairs(d) do
    flat[#flat + 1] = x
  end
end
return flat
