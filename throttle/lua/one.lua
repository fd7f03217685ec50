-- One request. KEYS[1]: the key. ARGV: now (µs; negative: Redis TIME),
-- alg, n, the 7 params (count burst period emission den tau limit), then
-- the TTL floor in ms.
-- Reply: {allowed, limit, remaining, retry µs (-1: never), reset µs}.
local now = clocknow(ARGV[1])
local f = decide[tonumber(ARGV[2])]
if f == nil then
  fail('algorithm ' .. tostring(ARGV[2]) .. ' is not in this script')
end
return {f(KEYS[1], readparams(ARGV, 4), now, tonumber(ARGV[3]))}
