-- The meters' single requests (GCRA, the token bucket and the leaky
-- bucket), the hot path of most users: meter_head.lua, then the
-- algorithm's *_debt.lua, then meter_tail.lua, sent as one script. It
-- does only what needs the server: read the key's state, compute its debt
-- (the used capacity that algorithms.go's decide function hands to meter:
-- same operations in the same order), write the new state if the request
-- fits, and reply with the debt. The Go side turns the debt into the
-- Decision with meter, the very function the definitions call, so both
-- stores decide as defined (the differential tests check it).
--
-- Why so little: Redis runs a script's body anew on every call, and every
-- Lua operation, string, table and C call costs the server time per
-- decision (bench/cmd/scriptinstr counts it in instructions). The dearest
-- were: a table reply (Redis inspects it field by field; one number is
-- one integer reply), a number passed to redis.call (Redis 7.0 formats it
-- with snprintf("%.17g"): the usual TTL goes as a string constant), and
-- every argument unpacked or global looked up. (prelude.lua, which the
-- other scripts share, is not part of these: its functions and tables
-- would be made anew on every call.)
--
-- KEYS[1]: the key. ARGV[1]: five little-endian IEEE doubles, six for the
-- token bucket (packd '<ddddd', built by meterArgs in
-- redis_script.go):
--   now    µs since the Unix epoch; negative: read Redis TIME
--   cost   n × emission, the request's cost in units
--   room   tau − cost, the most debt that still lets it in; −1 when
--          nothing is to be written (a peek, or n > burst: never fits)
--   den    units per µs
--   minttl the TTL floor in ms (1000: redis-cell #50)
--   tau    the token bucket's size in units (only tb_debt.lua reads it,
--          last, so that GCRA and the leaky bucket unpack one double fewer)
-- The state: prelude.lua's (STATE), three integers a, b, c, c = den when
-- written (0: no state), checked the same way; what a and b hold is the
-- algorithm's (algorithms.go's state).
-- Reply: the key's debt in units before the request, an integer below
-- 2^53.
local call, pack, unpack = redis.call, packd, unpackd
local now, cost, room, den, minttl = unpack('<ddddd', ARGV[1])
local tau = 0 -- the token bucket's: see above
if now < 0 then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
  if now >= 4503599627370496 then -- 2^52, maxMicros in store.go (the Go side checks its own clock)
    error('THROTTLE-ERR time ' .. string.format('%d', now) .. ' µs is out of range', 0)
  end
end
local key = KEYS[1]
local debt = 0
-- sa, sb, sc: the stored state; sc = 0 when there is none (a key without
-- a state and a state written with c = 0 are the same: no state).
local sa, sb, sc = 0, 0, 0
local s = call('GET', key) -- WRONGTYPE: the Go side names the key
if s then
  if #s ~= 24 then
    error('THROTTLE-WRONGTYPE ' .. key .. ': holds a string of ' .. #s .. ' bytes, not a state', 0)
  end
  sa, sb, sc = unpack('<ddd', s)
  -- Integers in [0, 2^53): x % 1 is 0 for an integer and NaN for NaN and
  -- ±Inf, so one sum tests all three.
  if sa % 1 + sb % 1 + sc % 1 ~= 0 or sa < 0 or sb < 0 or sc < 0
      or sa >= 9007199254740992 or sb >= 9007199254740992 or sc >= 9007199254740992 then
    error('THROTTLE-WRONGTYPE ' .. key .. ': holds a string that is not a state', 0)
  end
end
-- x − x % 1 is ⌊x⌋ for x ≥ 0 (prelude.lua: for integers below 2^53 the
-- rounded quotient a / b floors to Go's a / b), without a C call.
