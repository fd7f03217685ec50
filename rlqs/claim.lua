-- claim.lua: one server's claim on one bucket's limit (package rlqs), run
-- after redisscript's prelude (packd, unpackd) and internal/fairshare's
-- waterLevel, the water filling that package distributed's lease script
-- runs too.
--
-- KEYS[1]  ratelimit:rlqs:{h}, a hash. Field 'b': when the key was made
--          and until when it grants no raise (µs, two packed doubles).
--          One field per server, 's:' .. server id: its claim C (requests
--          per second), until when C counts U (µs), when it last claimed
--          (µs), its target T (what its clients' fair shares sum to),
--          then its clients' demands as (k, count) pairs, a demand
--          counting as 2^(k/16): all packed doubles.
-- ARGV[1]  packed doubles: now (µs; 0 reads TIME: anything else is for
--          tests), the limit (rate), the caller's floor, hold (µs), live
--          (µs: how long a server's demands count after its last claim),
--          known (1: the caller claimed on this bucket before), op (0
--          claim, 1 release, 2 check), then the caller's (k, count) pairs.
-- ARGV[2]  the caller's field, 's:' .. server id.
-- Reply:   packed doubles: the budget granted, the caller's target (the
--          max-min fair shares of its clients among all the bucket's),
--          the servers with a live claim (the caller included), the
--          clients counted, and 1 when another server's claim is short of
--          its target (it waits for others to lower theirs: claim again
--          soon), else 0.
--
-- The invariant: the claims that count (U in the future) sum to at most
-- the limit, except that a claim never falls below its floor, what the
-- server's clients may be running now, which it can only lower by
-- telling them and waiting. A claim is the caller's floor raised toward
-- the max-min fair shares of its clients among all the bucket's clients,
-- within what the other claims leave. Time comes from Redis (TIME): U is
-- set from a duration, so the servers' clocks never meet.
local now, rate, floor, hold, live, known, op = unpackd('<ddddddd', ARGV[1])
if now <= 0 then
  local t = redis.call('TIME')
  now = t[1] * 1e6 + t[2]
end
local all = redis.pcall('HGETALL', KEYS[1])
if all.err then
  local t = redis.call('TYPE', KEYS[1])['ok']
  return error({err = 'ERR ratelimit: key ' .. KEYS[1] .. ' holds a ' .. t .. ', not an rlqs bucket hash'})
end
if op == 2 then
  return packd('<ddddd', 0, 0, 0, 0, 0)
end
local INF = 1 / 0
local me = ARGV[2]
local others, servers, maxU, restrict, contested = 0, 0, now, nil, 0
local made, mine = now, false -- when the key was made; whether the caller's claim counts
local hist, dead = {}, {}
local function addPairs(v, i)
  while i + 15 <= #v do
    local k, c
    k, c, i = unpackd('<dd', v, i)
    hist[#hist + 1] = '0:' .. string.format('%d', k)
    hist[#hist + 1] = c
  end
end
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if f == 'b' then
    if #v == 16 then
      made, restrict = unpackd('<dd', v)
    end
  elseif f == me then
    if #v >= 32 then
      local _, u = unpackd('<dd', v)
      mine = u > now
    end
  else
    if #v < 32 then
      dead[#dead + 1] = f
    else
      local c, u, seen, target = unpackd('<dddd', v)
      if u <= now then
        dead[#dead + 1] = f
      else
        others, servers = others + c, servers + 1
        if u > maxU then maxU = u end
        if seen + live >= now then
          addPairs(v, 33)
          if c < target * 0.95 then contested = 1 end
        end
      end
    end
  end
end
if #dead > 0 then redis.call('HDEL', KEYS[1], unpack(dead)) end

local function expire(u)
  if u > maxU then maxU = u end
  redis.call('PEXPIRE', KEYS[1], math.ceil((maxU - now) / 1000) + 1000)
end

if op == 1 then
  -- Release: the floor counts for hold more, with no demand.
  if hold <= 0 then
    redis.call('HDEL', KEYS[1], me)
  else
    redis.call('HSET', KEYS[1], me, packd('<dddd', floor, now + hold, 0, 0))
    expire(now + hold)
  end
  return packd('<ddddd', floor, 0, servers + 1, 0, contested)
end

if restrict == nil then
  -- The key is new. Made by a server that claimed before, it means Redis
  -- lost the claims (restarted empty, failed over without them): until
  -- every live server has claimed again, nobody is raised.
  restrict = 0
  if known == 1 then restrict = now + live end
  redis.call('HSET', KEYS[1], 'b', packd('<dd', now, restrict))
elseif known == 1 and not mine and restrict <= now then
  -- The key is there but the caller's claim is not, or has lapsed: Redis
  -- was away longer than a claim counts (or lost it), and the others'
  -- claims may have lapsed too while their clients still run their
  -- shares. As for a new key: nobody is raised until they claim again.
  restrict = now + live
  redis.call('HSET', KEYS[1], 'b', packd('<dd', made, restrict))
end
addPairs(ARGV[1], 57)
local n, level, remaining = waterLevel(hist, rate)
local spare = 0
if level == INF and n > 0 then spare = remaining / n end
local target, i = 0, 57
while i + 15 <= #ARGV[1] do
  local k, c
  k, c, i = unpackd('<dd', ARGV[1], i)
  local v = 2 ^ (k / 16)
  if level < INF then
    if v > level then v = level end
  else
    v = v + spare
  end
  target = target + c * v
end
local budget = rate - others
if target < budget then budget = target end
if restrict > now then budget = 0 end
if not (budget > floor) then budget = floor end
redis.call('HSET', KEYS[1], me, packd('<dddd', budget, now + hold, now, target) .. string.sub(ARGV[1], 57))
expire(now + hold)
return packd('<ddddd', budget, target, servers + 1, n, contested)
