-- Shared by every throttle script (Redis has no include: the Go side sends
-- prelude.lua, the algorithm files and one main file as one script).
--
-- Numbers are doubles. Every integer stays below 2^53 (params in
-- limit.go ensures it), and for 0 <= a < 2^53, b >= 1, the correctly
-- rounded a / b cannot reach the next integer, so math.floor(a / b) and
-- math.ceil(a / b) are the exact integer quotients that Go computes.
--
-- Nothing is written before the last point at which a script can fail,
-- so a failed call changes nothing and the Go side may retry it with EVAL.

local MAXDEBT = 2251799813685248 -- 2^51, maxDebt in algorithms.go
local EXACT = 9007199254740992 -- 2^53

-- idiv is Go's a / b for a >= 0, b > 0.
local function idiv(a, b)
  return math.floor(a / b)
end

-- ceildiv is Go's ceilDiv: the ceiling of a / b for a >= 0, b > 0.
local function ceildiv(a, b)
  return math.ceil(a / b)
end

-- trunc is Go's int64(x) conversion of a float (toward zero).
local function trunc(x)
  if x >= 0 then
    return math.floor(x)
  end
  return math.ceil(x)
end

-- num formats an integer for a Redis argument without losing digits
-- (tostring keeps 14).
local function num(x)
  return string.format('%.17g', x)
end

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

-- int reads a stored field: absent is nil, anything but a non-negative
-- integer below 2^53 is another program's value.
local function int(key, v)
  if v == false or v == nil then
    return nil
  end
  local x = tonumber(v)
  if x == nil or x ~= math.floor(x) or x < 0 or x >= EXACT then
    wrongtype(key, 'field ' .. tostring(v) .. ' is not a counter')
  end
  return x
end

-- call runs a read-only command, turning WRONGTYPE into our error.
local function call(key, ...)
  local ok, r = pcall(redis.call, ...)
  if not ok then
    local msg = type(r) == 'table' and r.err or tostring(r)
    if string.find(msg, 'WRONGTYPE', 1, true) then
      wrongtype(key, 'holds a value of another type')
    end
    error(r)
  end
  return r
end

-- pexpire_us sets a key's TTL to us microseconds, rounded up to whole
-- milliseconds and never below one second (redis-cell #50: a TTL of 0
-- seconds deletes at once).
local function pexpire_us(key, us)
  redis.call('PEXPIRE', key, num(math.max(1000, ceildiv(us, 1000))))
end

-- The scripts decide against a view of their keys: what Redis holds, with
-- the changes of the checks already decided in this call on top, so that
-- two checks of one key in AllowAll see each other. Nothing is written to
-- Redis until flush, after every check has been decided: a script that
-- fails has written nothing.
local view = {}

-- readstate reads a hash state {a, b, c}; ok is false for a new key.
local function readstate(key)
  local v = view[key]
  if v == nil then
    local r = call(key, 'HMGET', key, 'a', 'b', 'c')
    local a, b, c = int(key, r[1]), int(key, r[2]), int(key, r[3])
    if a == nil and b == nil and c == nil then
      v = {st = {a = 0, b = 0, c = 0}, ok = false}
    elseif a == nil or b == nil or c == nil then
      wrongtype(key, 'hash lacks one of the fields a, b, c')
    else
      v = {st = {a = a, b = b, c = c}, ok = true}
    end
    view[key] = v
  end
  return v.st, v.ok
end

-- writestate records a hash state and its TTL (us microseconds) in the
-- view.
local function writestate(key, st, ttl)
  local v = view[key]
  v.st, v.ok, v.ttl, v.dirty = st, true, ttl, true
end

-- logview returns the view of a sliding log: the sorted set in Redis,
-- less its drop oldest entries, plus adds (groups {ts, n}, in order).
local function logview(key)
  local v = view[key]
  if v == nil then
    v = {log = true, card = call(key, 'ZCARD', key), drop = 0, adds = {}, addn = 0}
    view[key] = v
  end
  return v
end

-- flush writes every changed key of the view to Redis, with its TTL.
local function flush()
  for key, v in pairs(view) do
    if v.dirty and v.log then
      if v.drop > 0 then
        redis.call('ZREMRANGEBYRANK', key, 0, v.drop - 1)
      end
      for _, g in ipairs(v.adds) do
        -- Entries at g.ts are live (ts >= now), so the dropped ones were
        -- older and the members g.ts:1 .. g.ts:have are all still there.
        local ts = num(g.ts)
        local have = redis.call('ZCOUNT', key, ts, ts)
        local args = {}
        for i = 1, g.n do
          args[#args + 1] = ts
          args[#args + 1] = ts .. ':' .. num(have + i)
          if #args >= 512 then
            redis.call('ZADD', key, unpack(args))
            args = {}
          end
        end
        if #args > 0 then
          redis.call('ZADD', key, unpack(args))
        end
      end
      pexpire_us(key, v.ttl)
    elseif v.dirty then
      redis.call('HSET', key, 'a', num(v.st.a), 'b', num(v.st.b), 'c', num(v.st.c))
      pexpire_us(key, v.ttl)
    end
  end
end

-- A decision: {allowed 0/1, limit, remaining, retry µs (-1: never), reset µs}.
local NEVER = -1

-- p is a check's params (limit.go), read from 8 arguments.
local function readparams(argv, i)
  return {
    count = tonumber(argv[i]), burst = tonumber(argv[i + 1]), period = tonumber(argv[i + 2]),
    emission = tonumber(argv[i + 3]), den = tonumber(argv[i + 4]), tau = tonumber(argv[i + 5]),
    limit = tonumber(argv[i + 6]),
  }
end

-- decide[alg] (alg as in limit.go: 1 GCRA ... 6 SlidingLog) decides n for
-- key at now; an allowed request writes its state into the view.
-- It returns the decision (a table of 5 integers).
local decide = {}

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
    fail('time ' .. num(now) .. ' µs is out of range')
  end
  return now
end

-- stored_window is storedWindow in algorithms.go: the index, in windows
-- of p.period, of the window holding the last µs of a window ending at e.
local function stored_window(p, e)
  return idiv(math.max(0, e - 1), p.period)
end

-- meter is meter in algorithms.go: it decides n for a meter (GCRA or a
-- bucket) whose used capacity is used units of tau, and returns the
-- decision, the used capacity after the request and whether it was allowed.
local function meter(p, used, now, n)
  if n > p.burst then
    return {0, p.limit, idiv(math.max(0, p.tau - used), p.emission), NEVER, ceildiv(used, p.den)}, used, false
  end
  local nxt = used + n * p.emission
  if nxt > p.tau and n > 0 then
    return {0, p.limit, idiv(math.max(0, p.tau - used), p.emission), ceildiv(nxt - p.tau, p.den), ceildiv(used, p.den)}, used, false
  end
  return {1, p.limit, idiv(math.max(0, p.tau - nxt), p.emission), 0, ceildiv(nxt, p.den)}, nxt, true
end
