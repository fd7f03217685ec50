-- engine.lua: the smooth limiter's state and arithmetic, a line-by-line
-- port of smooth/engine.go in microsecond mode (ticksPerSecond = 1e6).
--
-- Redis runs Lua 5.1, whose only number type is a double. Every tick count
-- here is an integer-valued double, exact below 2^53 µs (285 years), so the
-- results equal the Go engine's int64 arithmetic bit for bit; the test
-- TestScriptMatchesEngine checks that on random operation sequences. Java's
-- (long) cast, which the Go engine emulates with javaLong, is emulated here
-- with floor/ceil and explicit NaN and saturation checks. Beyond 2^53 the
-- two may differ in the last units; the lease script never gets there (it
-- clamps absurd debts).
--
-- This file is prepended to lease.lua; it defines only local functions.

local TPS = 1e6
local INF = 1 / 0 -- not math.huge: gopher-lua's (miniredis) is the largest finite double
local TWO63 = 9223372036854775808 -- 2^63: Java's Long.MAX_VALUE as a double

-- goMin is Go's math.Min: NaN if either argument is NaN (Lua's math.min
-- depends on the argument order).
local function goMin(a, b)
  if a ~= a or b ~= b then return 0/0 end
  if a < b then return a end
  return b
end

-- javaLong is Java's (long) cast: truncation toward zero, NaN to 0,
-- saturation at ±2^63.
local function javaLong(x)
  if x ~= x then return 0 end
  if x >= TWO63 then return TWO63 end
  if x <= -TWO63 then return -TWO63 end
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end

-- satAdd is Guava's LongMath.saturatedAdd on integer-valued doubles.
local function satAdd(a, b)
  local s = a + b
  if s >= TWO63 then return TWO63 end
  if s <= -TWO63 then return -TWO63 end
  return s
end

-- enc and dec store doubles as strings that read back bit for bit
-- (%.17g), with the special values spelled the way Go's ParseFloat reads
-- them.
local function enc(x)
  if x ~= x then return 'NaN' end
  if x == INF then return '+Inf' end
  if x == -INF then return '-Inf' end
  return string.format('%.17g', x)
end

local function dec(v)
  if v == 'NaN' then return 0/0 end
  if v == '+Inf' then return INF end
  if v == '-Inf' then return -INF end
  return tonumber(v)
end

-- newState is the engine's zero value for a kind: 'b' (SmoothBursty,
-- storing burst seconds of permits) or 'w' (SmoothWarmingUp over warmup µs
-- with the cold factor).
local function newState(kind, burst, warmup, cold)
  return {kind = kind, stored = 0, max = 0, interval = 0, next = 0,
          burst = burst, warmup = warmup, cold = cold,
          threshold = 0, slope = 0}
end

local function coolDownInterval(s)
  if s.kind == 'b' or s.warmup == 0 then return s.interval end
  return s.warmup / s.max
end

-- resync stores the permits earned since next, if now is later.
local function resync(s, now)
  if now > s.next then
    local newPermits = (now - s.next) / coolDownInterval(s)
    s.stored = goMin(s.max, s.stored + newPermits)
    s.next = now
  end
end

local function permitsToTime(s, p)
  return s.interval + p * s.slope
end

-- storedPermitsToWaitTime prices spending k stored permits: free for a
-- bursty limiter, the trapezoid above the threshold plus the rectangle
-- below it for a warming-up one.
local function storedPermitsToWaitTime(s, stored, k)
  if s.kind == 'b' then return 0 end
  local above = stored - s.threshold
  local ticks = 0
  if above > 0 then
    local take = goMin(above, k)
    local length = permitsToTime(s, above) + permitsToTime(s, above - take)
    ticks = javaLong(take * length / 2.0)
    k = k - take
  end
  return ticks + javaLong(s.interval * k)
end

-- reserve books permits at now (Guava's reserveEarliestAvailable) and
-- returns the moment at which they may be used. It also returns the cost
-- pushed onto nextFreeTicket.
local function reserve(s, permits, now)
  resync(s, now)
  local moment = s.next
  local storedToSpend = goMin(permits, s.stored)
  local freshPermits = permits - storedToSpend
  local wait = storedPermitsToWaitTime(s, s.stored, storedToSpend) +
    javaLong(freshPermits * s.interval)
  s.next = satAdd(s.next, wait)
  s.stored = s.stored - storedToSpend
  return moment, wait
end

local function setRateBursty(s, rate, oldMax)
  if s.burst == 0 then
    s.max = 0
  else
    s.max = s.burst * rate
  end
  if oldMax == INF then
    s.stored = s.max
  elseif oldMax == 0 then
    s.stored = 0
  else
    s.stored = s.stored * s.max / oldMax
  end
end

local function setRateWarmingUp(s, oldMax)
  if s.warmup == 0 then
    s.threshold, s.max, s.slope, s.stored = 0, 0, 0, 0
    return
  end
  local w = s.warmup
  local coldInterval = s.interval * s.cold
  s.threshold = 0.5 * w / s.interval
  s.max = s.threshold + 2.0 * w / (s.interval + coldInterval)
  s.slope = (coldInterval - s.interval) / (s.max - s.threshold)
  if oldMax == INF then
    s.stored = 0
  elseif oldMax == 0 then
    s.stored = s.max
  else
    s.stored = s.stored * s.max / oldMax
  end
end

-- setRate is Guava's doSetRate: resync at the old rate, then rescale the
-- stored permits to the new capacity. Like the Go engine it replaces a NaN
-- or +Inf stored count at a finite rate with the conservative end, and
-- caps a rescale that rounds past the new capacity (stored*max/oldMax can
-- exceed max by an ulp, and by far when oldMax is subnormal).
local function setRate(s, rate, now)
  resync(s, now)
  s.interval = TPS / rate
  local oldMax = s.max
  if s.kind == 'b' then
    setRateBursty(s, rate, oldMax)
  else
    setRateWarmingUp(s, oldMax)
  end
  if rate ~= INF and (s.stored ~= s.stored or s.stored == INF) then
    if s.kind == 'b' then s.stored = 0 else s.stored = s.max end
  elseif rate ~= INF and s.stored > s.max then
    s.stored = s.max
  end
end

local function rateOf(s)
  return TPS / s.interval
end

-- The state is stored in one hash field, 'e': the engine's numbers (and
-- the caller's extra ones) packed as little-endian doubles, so that they
-- are read and written bit for bit without formatting or parsing a
-- decimal string (HMGET of 19 fields and their tonumber took about 6 µs
-- of a lease, %.17g about 0.5 µs per field). kind is packed as 0
-- (bursty) or 1 (warming up). The configuration is also written as
-- readable fields (kind, burst, warmup, cold, and unit: what a permit
-- stands for) when the state is made, for people and tools; only a
-- limiter's first leases read the unit back.
local STATE_FIELDS = {'kind', 'stored', 'max', 'interval', 'next', 'burst',
  'warmup', 'cold', 'threshold', 'slope', 'ver', 'lc', 'born'}

-- wrongType raises the error for a key of another type than a hash. It
-- runs only after a command failed: asking TYPE up front would cost a
-- command on every call.
local function wrongType(key, what)
  local t = redis.call('TYPE', key)['ok']
  return error({err = 'ERR ratelimit: key ' .. key .. ' holds a ' .. t .. ', not the limiter ' .. what .. ' hash'})
end

local function layout(extra)
  local n = #STATE_FIELDS
  if extra then n = n + #extra end
  return '<' .. string.rep('d', n), n
end

-- loadState reads the state at key; nil when it does not exist. A key of
-- another type, or a state of the wrong size, is an error, never a silent
-- reset. extra names more numbers stored after the engine's (a caller
-- must always pass the same list). s.packed keeps the stored bytes, so
-- that saveState writes nothing when nothing changed.
local function loadState(key, extra)
  local v = redis.pcall('HGET', key, 'e')
  if type(v) == 'table' and v.err then return wrongType(key, 'state') end
  if not v then return nil end
  local fmt, n = layout(extra)
  if #v ~= 8 * n then
    return error({err = 'ERR ratelimit: key ' .. key .. ' has a corrupt state (' .. #v .. ' bytes, want ' .. 8 * n .. ')'})
  end
  local x = {unpackd(fmt, v)}
  local s = {packed = v}
  for i = 1, #STATE_FIELDS do s[STATE_FIELDS[i]] = x[i] end
  if extra then
    for i = 1, #extra do s[extra[i]] = x[#STATE_FIELDS + i] end
  end
  if s.kind == 1 then s.kind = 'w' else s.kind = 'b' end
  return s
end

-- saveState writes the state if it changed since loadState (a new one
-- always, with its readable configuration), and the field f with the value
-- fv if given, in the same command.
local function saveState(key, s, extra, f, fv)
  local x = {}
  for i = 1, #STATE_FIELDS do x[i] = s[STATE_FIELDS[i]] end
  if s.kind == 'w' then x[1] = 1 else x[1] = 0 end
  if extra then
    for i = 1, #extra do x[#STATE_FIELDS + i] = s[extra[i]] end
  end
  local v = packd((layout(extra)), unpack(x))
  local args = {}
  if v ~= s.packed then args = {'e', v} end
  if s.packed == nil then
    args = {'e', v, 'kind', s.kind, 'burst', enc(s.burst), 'warmup', enc(s.warmup), 'cold', enc(s.cold),
      'unit', s.unit or ''}
  end
  if f then
    args[#args + 1] = f
    args[#args + 1] = fv
  end
  if #args > 0 then redis.call('HSET', key, unpack(args)) end
end

-- encDouble packs x for a reply: 8 bytes, read back bit for bit.
local function encDouble(x)
  return packd('<d', x)
end
