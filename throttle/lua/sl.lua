-- SlidingLog: a line-by-line port of decideSlidingLog in algorithms.go.
-- State: a sorted set with one member per admitted unit, scored by its
-- time in µs; members are "<ts>:<i>", i counting the units logged at ts
-- (1, 2, ...), so requests in the same microsecond never collide. The
-- decision reads the log through its view (prelude.lua): Len and At of
-- the Go logState.

-- A sliding log is read through a table: the sorted set in Redis, less its
-- drop oldest entries, plus adds (groups {ts, n}, in order), with its TTL.
local function logview(key)
  if view and view[key] then
    return view[key]
  end
  -- A WRONGTYPE here is mapped to ErrWrongType by the Go side.
  local v = {log = true, card = redis.call('ZCARD', key), drop = 0, adds = {}, addn = 0}
  if view then
    view[key] = v
  end
  return v
end

-- writelog writes a sliding log's changes.
local function writelog(key, v)
  if v.drop > 0 then
    redis.call('ZREMRANGEBYRANK', key, 0, v.drop - 1)
  end
  for _, g in ipairs(v.adds) do
    -- Entries at g.ts are live (ts >= now), so the dropped ones were
    -- older and the members ts:1 .. ts:have are all still there.
    local have = redis.call('ZCOUNT', key, g.ts, g.ts)
    local ts = string.format('%d', g.ts)
    local args = {}
    for i = 1, g.n do
      args[#args + 1] = g.ts
      args[#args + 1] = ts .. ':' .. string.format('%d', have + i)
      if #args >= 512 then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    if #args > 0 then
      redis.call('ZADD', key, unpack(args))
    end
  end
  redis.call('PEXPIRE', key, ttlms(v.ttl))
end

-- sl_len is logState.Len.
local function sl_len(lg)
  return lg.card - lg.drop + lg.addn
end

-- sl_at is logState.At: the time of the i-th oldest entry (from 0).
local function sl_at(key, lg, i)
  local base = lg.card - lg.drop
  if i < base then
    local v = redis.call('ZRANGE', key, lg.drop + i, lg.drop + i, 'WITHSCORES')
    local ts = tonumber(v[2])
    if ts == nil or ts ~= floor(ts) or ts < 0 or ts >= EXACT then
      wrongtype(key, 'entry ' .. tostring(v[1]) .. ' is not at a time in µs')
    end
    return ts
  end
  i = i - base
  for _, g in ipairs(lg.adds) do
    if i < g.n then
      return g.ts
    end
    i = i - g.n
  end
  fail('sliding log index out of range')
end

-- sl_expired counts the leading entries at or before t: the loop of
-- decideSlidingLog, done by ZCOUNT (the log is sorted). Added entries are
-- never before now, so never expired.
local function sl_expired(key, lg, t)
  local base = lg.card - lg.drop
  if base == 0 then
    return 0
  end
  return max(0, redis.call('ZCOUNT', key, '-inf', t) - lg.drop)
end

decide[6] = function(key, p, now, n)
  local lg = logview(key)
  local total = sl_len(lg)
  local expired = 0
  if total > 0 then
    expired = sl_expired(key, lg, now - p.period)
  end
  local count = total - expired
  local newest = 0
  if count > 0 then
    newest = sl_at(key, lg, total - 1)
  end
  local allowed, retry, write, at = 0, 0, false, 0
  if n > p.count then
    retry = NEVER
  elseif n > 0 and count + n > p.count then
    local k = count + n - p.count -- the k-th oldest live entry must expire
    retry = sl_at(key, lg, expired + k - 1) + p.period - now
  else
    allowed = 1
    if n > 0 then
      at = max(now, newest)
      newest = at
      count = count + n
      write = true
    end
  end
  local reset = 0
  if count > 0 then
    reset = newest + p.period - now
  end
  if write then
    lg.drop = lg.drop + expired
    lg.adds[#lg.adds + 1] = {ts = at, n = n}
    lg.addn = lg.addn + n
    lg.ttl, lg.dirty = reset, true
    if not view then
      writelog(key, lg)
    end
  end
  return allowed, p.limit, max(0, p.count - count), retry, reset
end
