-- Adds hits to the reference's fixed-window counters, all in one step.
--
-- KEYS[i]: the i-th window's counter (its key ends in the window's start).
-- ARGV[1]: the mode:
--   '0'  count every hit, refused ones too, as envoyproxy/ratelimit does;
--   '1'  whole calls: the keys are split into calls (after the windows'
--        arguments, each call's number of keys, in order), and a call
--        whose windows all stay within their limits counts its hits in
--        every one of them, any other call in none;
--   '2'  undo: take each window's hits back (never below 0, and only from
--        a counter that still exists), for a call refused after counting.
-- ARGV[3i-1], ARGV[3i], ARGV[3i+1]: the i-th window's hits (an integer up
--   to MAX), its limit and the seconds until it ends (its counter's TTL).
-- Returns, per window, a count: in mode 0 the count after the hits; in
-- mode 1 the count after the hits (and the call's hits before them on the
-- same key) when the call counted or when this window alone goes over its
-- limit, else the count it holds, unchanged; in mode 2 the count left. A
-- key that holds something other than a count answers -1: the keys may be
-- several calls' (see batch.go), and one call's bad key must not fail the
-- others (in mode 1 its own call counts nothing). An error that is the
-- server's condition, not one key's (OOM: out of memory under maxmemory and
-- noeviction; READONLY, MISCONF, NOREPLICAS: it refuses writes now), is the
-- script's answer, for every call of the batch.
--
-- A count saturates at MAX = 2^53 − 1: a double holds every integer up to
-- it exactly, and INCRBY of at most MAX on at most MAX cannot overflow,
-- so a huge hits_addend leaves a counter that later calls still read (and
-- find over any limit). A count near 2^63, written by another program,
-- makes INCRBY fail with an overflow: it is set back to MAX, its TTL kept.
-- The TTL is set only when the counter is created: one EXPIRE per window,
-- not one per hit. INCRBY is given its increment as an integer string:
-- Redis formats a Lua number of 10^17 or more in exponent notation, which
-- INCRBY refuses.
local rpcall, call, tonumber, fmt, min, match = redis.pcall, redis.call, tonumber, string.format, math.min, string.match
local MAX = 9007199254740991
local MAXS = '9007199254740991'
local mode = ARGV[1]
local out = {}

-- saturate sets key to MAX, keeping its TTL (or giving it the window's).
local function saturate(key, ttl)
  local left = call('PTTL', key)
  call('SET', key, MAXS)
  if left > 0 then
    call('PEXPIRE', key, left)
  else
    call('EXPIRE', key, ttl)
  end
end

-- serverwide: whether a command's error reply is a server's that refuses
-- every write now, whatever the key.
local function serverwide(e)
  local code = match(e.err or '', '^%u+')
  return code == 'OOM' or code == 'READONLY' or code == 'MISCONF' or code == 'NOREPLICAS'
end

-- read returns the count key holds (0 when absent, at most MAX) and
-- whether it exists, or -1 when it holds something else.
local function read(key)
  local v = rpcall('GET', key)
  if type(v) == 'table' then
    if serverwide(v) then
      error(v)
    end
    return -1, true
  end
  if not v then
    return 0, false
  end
  local n = tonumber(v)
  if n == nil or n < 0 or n % 1 ~= 0 then
    return -1, true
  end
  return min(n, MAX), true
end

if mode == '0' then
  for i, key in ipairs(KEYS) do
    local hits = tonumber(ARGV[3 * i - 1])
    local count
    if hits == 0 then
      count = read(key)
    else
      count = rpcall('INCRBY', key, ARGV[3 * i - 1])
      if type(count) == 'table' then
        if serverwide(count) then
          return count
        end
        if string.find(count.err, 'overflow', 1, true) then
          saturate(key, ARGV[3 * i + 1])
          count = MAX
        else
          count = -1
        end
      else
        if count == hits then
          call('EXPIRE', key, ARGV[3 * i + 1])
        end
        if count > MAX then
          saturate(key, ARGV[3 * i + 1])
          count = MAX
        end
      end
    end
    out[i] = count
  end
elseif mode == '1' then
  local n = #KEYS
  local first = 1
  for g = 3 * n + 2, #ARGV do
    local last = first + tonumber(ARGV[g]) - 1
    -- seen: the call's count so far per key; held: what the key holds.
    local seen, held, existed, keys = {}, {}, {}, {}
    local refused = false
    for i = first, last do
      local key = KEYS[i]
      local cur = seen[key]
      if cur == nil then
        local e
        cur, e = read(key)
        held[key], existed[key] = cur, e
        keys[#keys + 1] = i
      end
      if cur < 0 then
        out[i] = -1
        refused = true
      else
        local after = min(cur + tonumber(ARGV[3 * i - 1]), MAX)
        seen[key], out[i] = after, after
        if after > tonumber(ARGV[3 * i]) then
          refused = true
        end
      end
    end
    if refused then
      for i = first, last do
        if out[i] >= 0 and out[i] <= tonumber(ARGV[3 * i]) then
          out[i] = held[KEYS[i]]
        end
      end
    else
      for _, i in ipairs(keys) do
        local key = KEYS[i]
        local add = seen[key] - held[key]
        if add > 0 then
          call('INCRBY', key, fmt('%d', add))
          if not existed[key] then
            call('EXPIRE', key, ARGV[3 * i + 1])
          end
        end
      end
    end
    first = last + 1
  end
else
  for i, key in ipairs(KEYS) do
    local cur = read(key)
    local take = min(cur, tonumber(ARGV[3 * i - 1]))
    if take > 0 then
      call('DECRBY', key, fmt('%d', take))
      cur = cur - take
    end
    out[i] = cur
  end
end
return out
