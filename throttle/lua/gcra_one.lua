-- GCRA for one request, the hot path of most users. It does only what
-- needs the server: read the key's state, compute its debt (the first half
-- of decideGCRA in algorithms.go, same operations in the same order),
-- write the new state if the request fits, and reply with the debt. The Go
-- side turns the debt into the Decision with meter, the very function the
-- definition (decideGCRA) calls, so both stores decide as defined (the
-- differential tests check it).
--
-- Why so little: Redis runs a script's body anew on every call, and every
-- Lua operation, string, table and C call costs the server time per
-- decision (bench/cmd/scriptinstr counts it in instructions). The dearest
-- were: a table reply (Redis inspects it field by field; one number is
-- one integer reply), a number passed to redis.call (Redis 7.0 formats it
-- with snprintf("%.17g"): the usual TTL goes as a string constant), and
-- every argument unpacked or global looked up.
--
-- KEYS[1]: the key. ARGV[1]: five little-endian IEEE doubles (struct.pack
-- '<ddddd', built by gcraArgs in redis_script.go):
--   now    µs since the Unix epoch; negative: read Redis TIME
--   cost   n × emission, the request's cost in units
--   room   tau − cost, the most debt that still lets it in; −1 when
--          nothing is to be written (a peek, or n > burst: never fits)
--   den    units per µs
--   minttl the TTL floor in ms (1000: redis-cell #50)
-- The state: prelude.lua's (STATE), a = TAT in whole µs, b = TAT's
-- fraction in units, c = den when written, checked the same way.
-- Reply: the key's debt in units before the request, an integer below
-- 2^53.
local call, pack, unpack = redis.call, struct.pack, struct.unpack
local now, cost, room, den, minttl = unpack('<ddddd', ARGV[1])
if now < 0 then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
  if now >= 4503599627370496 then -- 2^52, maxMicros in store.go (the Go side checks its own clock)
    error('THROTTLE-ERR time ' .. string.format('%d', now) .. ' µs is out of range', 0)
  end
end
local key = KEYS[1]
local debt = 0
local s = call('GET', key) -- WRONGTYPE: the Go side names the key
if s then
  if #s ~= 24 then
    error('THROTTLE-WRONGTYPE ' .. key .. ': holds a string of ' .. #s .. ' bytes, not a state', 0)
  end
  local tat, rem, c = unpack('<ddd', s)
  -- Integers in [0, 2^53): x % 1 is 0 for an integer and NaN for NaN and
  -- ±Inf, so one sum tests all three.
  if tat % 1 + rem % 1 + c % 1 ~= 0 or tat < 0 or rem < 0 or c < 0
      or tat >= 9007199254740992 or rem >= 9007199254740992 or c >= 9007199254740992 then
    error('THROTTLE-WRONGTYPE ' .. key .. ': holds a string that is not a state', 0)
  end
  if c ~= den then
    if c == 0 then -- no state (gcra.lua: ok and sc > 0)
      tat = 0
    elseif rem > 0 then -- written under another limit: whole µs, rounded up
      tat = tat + 1
    end
    rem = 0
  end
  local d = tat - now
  if d >= 0 then
    -- min(d, quo(maxDebt, den)): for a whole d, d > a / b exactly when
    -- d > ⌊a / b⌋ (prelude.lua: the rounded quotient stays below the next
    -- integer), so the floor is only taken when it is needed.
    if d > 2251799813685248 / den then -- 2^51: maxDebt
      d = 2251799813685248 / den
      d = d - d % 1
    end
    debt = d * den + rem
  end
end
if debt <= room then
  -- decideGCRA's new state: q = ⌊next/den⌋ (x − x % 1 is floor(x)), the
  -- remainder r = next % den; the TTL is ResetAfter = ⌈next/den⌉ µs in
  -- whole ms rounded up, never below minttl.
  local nxt = debt + cost
  local q = nxt / den
  q = q - q % 1
  local r = nxt - q * den
  local ttl = q
  if r > 0 then
    ttl = q + 1
  end
  ttl = (ttl + 999) / 1000
  ttl = ttl - ttl % 1
  if ttl <= minttl then
    ttl = minttl
    if minttl == 1000 then
      ttl = '1000' -- the usual TTL, as a string: no snprintf
    end
  end
  -- PSETEX (SET … PX's older spelling, kept by every Redis): one
  -- argument fewer for Redis to build.
  call('PSETEX', key, ttl, pack('<ddd', now + q, r, den))
end
return debt
