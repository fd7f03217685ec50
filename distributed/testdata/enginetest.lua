-- enginetest.lua: test-only driver appended to engine.lua. It applies one
-- engine operation at an explicit time to the state hash KEYS[1], so that
-- TestScriptMatchesEngine can compare the Lua arithmetic with the Go engine.
--
-- ARGV: op, now, then per op
--   new   kind burst warmup cold rate
--   reserve permits
--   setrate rate
-- Reply: {moment, next, stored, max, rate} as exact strings.
local op, now = ARGV[1], tonumber(ARGV[2])
local s
if op == 'new' then
  s = newState(ARGV[3], dec(ARGV[4]), tonumber(ARGV[5]), dec(ARGV[6]))
  s.ver, s.lc, s.born = 1, 0, now
  setRate(s, dec(ARGV[7]), now)
  saveState(KEYS[1], s)
  return {'0', enc(s.next), enc(s.stored), enc(s.max), enc(rateOf(s))}
end
s = loadState(KEYS[1])
local moment = 0
if op == 'reserve' then
  moment = reserve(s, tonumber(ARGV[3]), now)
elseif op == 'setrate' then
  setRate(s, dec(ARGV[3]), now)
else
  return redis.error_reply('ERR unknown op ' .. op)
end
saveState(KEYS[1], s)
return {enc(moment), enc(s.next), enc(s.stored), enc(s.max), enc(rateOf(s))}
