-- Shared by every throttle script (Redis has no include: the Go side sends
-- prelude.lua, the algorithm files and one main file as one script).
--
-- Numbers are doubles. Every integer stays below 2^53 (params in
-- limit.go ensures it), and for 0 <= a < 2^53, b >= 1, the correctly
-- rounded a / b cannot reach the next integer, so math.floor(a / b) and
-- math.ceil(a / b) are the exact integer quotients that Go computes.
-- Numbers given to redis.call are formatted by Redis with %.17g, which is
-- exact for them; Lua's own tostring and .. keep only 14 digits, so
-- strings are built with string.format('%d').
--
-- Nothing is written before the last point at which a script can fail,
-- so a failed call changes nothing and the Go side may retry it with EVAL.
-- The scripts run on every decision: they allocate as few tables and
-- strings as they can (each costs the server time, and garbage).

local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local MAXDEBT = 2251799813685248 -- 2^51, maxDebt in algorithms.go
local EXACT = 9007199254740992 -- 2^53

-- Go's a / b for a >= 0, b > 0 is written floor(a / b), and Go's
-- ceilDiv(a, b) ceil(a / b) (see above why both are exact); a function
-- call each would cost the server time on every decision.

-- wrongtype aborts with our own error, a string that Redis wraps in its
-- "script error" text; the Go side finds the marker in it, maps it to
-- ErrWrongType and does not retry it with EVAL.
local function wrongtype(key, why)
  error('THROTTLE-WRONGTYPE ' .. key .. ': ' .. why, 0)
end

-- fail aborts with our own error for anything else (bad arguments).
local function fail(why)
  error('THROTTLE-ERR ' .. why, 0)
end

-- ttlms is a TTL of us microseconds in whole milliseconds, rounded up and
-- never below MINTTL, the floor the entry file reads from its arguments:
-- one second (redis-cell #50: a TTL of 0 seconds deletes at once), longer
-- in tests whose fake clock has nothing to do with the one Redis expires
-- keys by.
local MINTTL
local function ttlms(us)
  return max(MINTTL, ceil(us / 1000))
end

-- The state of GCRA, the buckets and the windows is three integers a, b,
-- c (algorithms.go's state), kept as a 24-byte string: three
-- little-endian IEEE doubles (STATE, packd: struct.pack, or its pure-Lua
-- twin where the server lacks struct), written with SET PX in one command. Binary because the server reads and writes it on every
-- decision: one struct.unpack costs less than a pattern match and three
-- decimal conversions, and struct.pack less than string.format. Little-
-- endian because that is the byte order of the machines Redis runs on:
-- struct then copies the bytes instead of reversing them. Doubles hold
-- every integer below 2^53 exactly. The meter scripts (meter_head.lua,
-- meter_tail.lua) read and write the meters' states in the same layout.
local STATE = '<ddd'

-- view is false when a script decides one request: reads and writes go
-- to Redis. AllowAll's script sets it to a table: the keys as the checks
-- already decided in this call left them, so that two checks of one key
-- see each other; nothing is written until flush, after every check has
-- been decided.
local view = false

-- readstate returns a, b, c and ok (false: a new key).
local function readstate(key)
  if view then
    local v = view[key]
    if v then
      return v.a, v.b, v.c, v.ok
    end
  end
  local a, b, c, ok = 0, 0, 0, false
  local s = redis.call('GET', key) -- WRONGTYPE: the Go side names the key
  if s then
    if #s ~= 24 then
      wrongtype(key, 'holds a string of ' .. #s .. ' bytes, not a state')
    end
    a, b, c = unpackd(STATE, s)
    -- Integers in [0, 2^53) (NaN fails the first test).
    if a ~= floor(a) or b ~= floor(b) or c ~= floor(c) or min(a, b, c) < 0 or max(a, b, c) >= EXACT then
      wrongtype(key, 'holds a string that is not a state')
    end
    ok = true
  end
  if view then
    view[key] = {a = a, b = b, c = c, ok = ok}
  end
  return a, b, c, ok
end

local function setstate(key, a, b, c, ttl)
  redis.call('SET', key, packd(STATE, a, b, c), 'PX', ttlms(ttl))
end

-- writestate writes a state and its TTL (ttl µs), or records it in the
-- view.
local function writestate(key, a, b, c, ttl)
  if view then
    local v = view[key]
    v.a, v.b, v.c, v.ok, v.ttl, v.dirty = a, b, c, true, ttl, true
    return
  end
  setstate(key, a, b, c, ttl)
end

-- A decision is five integers: allowed 0/1, limit, remaining, retry µs
-- (-1: never), reset µs.
local NEVER = -1

-- p is a check's params (limit.go), read from 7 arguments.
local function readparams(argv, i)
  return {
    count = tonumber(argv[i]), burst = tonumber(argv[i + 1]), period = tonumber(argv[i + 2]),
    emission = tonumber(argv[i + 3]), den = tonumber(argv[i + 4]), tau = tonumber(argv[i + 5]),
    limit = tonumber(argv[i + 6]),
  }
end

-- clocknow returns the time in whole µs since the Unix epoch: arg when it
-- is not negative (WithClock), else Redis TIME.
local function clocknow(arg)
  local now = tonumber(arg)
  if now == nil then
    fail('time argument ' .. tostring(arg) .. ' is not a number')
  end
  if now < 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if now >= 4503599627370496 then -- 2^52, maxMicros in store.go
    fail('time ' .. string.format('%d', now) .. ' µs is out of range')
  end
  return now
end

-- stored_window is storedWindow in algorithms.go: the index, in windows
-- of p.period, of the window holding the last µs of a window ending at e.
local function stored_window(p, e)
  return floor(max(0, e - 1) / p.period)
end

-- meter is meter in algorithms.go: it decides n for a meter (GCRA or a
-- bucket) whose used capacity is used units of tau, and returns the
-- decision's five integers, then the used capacity after the request.
local function meter(p, used, now, n)
  if n > p.burst then
    return 0, p.limit, floor(max(0, p.tau - used) / p.emission), NEVER, ceil(used / p.den), used
  end
  local nxt = used + n * p.emission
  if nxt > p.tau and n > 0 then
    return 0, p.limit, floor(max(0, p.tau - used) / p.emission), ceil((nxt - p.tau) / p.den), ceil(used / p.den), used
  end
  return 1, p.limit, floor(max(0, p.tau - nxt) / p.emission), 0, ceil(nxt / p.den), nxt
end

-- decide[alg] (alg as in limit.go: 1 GCRA ... 6 SlidingLog) decides n for
-- key at now; an allowed request with n > 0 writes its state. It returns
-- the decision's five integers.
local decide = {}
