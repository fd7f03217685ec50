-- hot.lua: the common lease, answered before engine.lua and lease.lua run.
--
-- Redis runs a script's whole body on every call, so every local function
-- and table the engine and the protocol define is made again per call: a
-- lease through them cost the server about 4 × what redis_rate's GCRA does,
-- most of it in closures, tables and extra commands. This block answers a
-- lease on an existing state, of a limiter that has joined (join 0), with
-- straight-line code on locals: TIME, one HMGET (the state and the
-- caller's registry entry), the histogram moves it needs (and, when a slot
-- begins, the histogram's drop and the registry's sweep), and one HSET.
-- Anything else (a new state, a join, a newer configuration, a wrong-typed
-- key, a refund, setrate) falls through to lease.lua before anything is
-- written, and lease.lua does the same arithmetic in the same order;
-- TestHotPathMatchesLeaseScript and FuzzHotPathMatchesLeaseScript hold the
-- two equal, reply and stored bytes.
--
-- The literal constants are lease.lua's: MAX_WAIT (1e6), MIN_TTL_MS (1000),
-- MAX_TTL_MS (86400000), REFRESH (10000), BUCKETS (16) and ZERO (-1e9).
--
-- Arguments and layout: see lease.lua. Only a lease in the compact form
-- comes here (two arguments: Redis makes a Lua string of every argument,
-- which costs about as much per argument as a line of arithmetic here, and
-- this block reads its numbers with one unpackd, not one strtod
-- each). The reply is lease.lua's nine numbers, packed as little-endian
-- doubles in one string.

-- sweep deletes the registry entries that no longer count among 64 fields
-- after cursor sc (HSCAN COUNT), for a new slot cur, and returns the next
-- cursor: dead entries cost only memory, so a slow sweep is enough, at
-- least 128 a second. It and waterLevel (internal/fairshare's
-- waterlevel.lua, which comes before this file: the water filling over the
-- demand histogram) are used here and by lease.lua (one chunk), and made
-- once per call: a closure costs about 1 % of a lease.
local function sweep(sc, cur)
  local r = redis.call('HSCAN', KEYS[1], string.format('%d', sc), 'MATCH', 'p:*', 'COUNT', '64')
  local dead = {}
  for i = 1, #r[2], 2 do
    local ev = r[2][i + 1]
    if #ev ~= 24 or unpackd('<d', ev) < cur - 1 then dead[#dead + 1] = r[2][i] end
  end
  if #dead > 0 then redis.call('HDEL', KEYS[1], unpack(dead)) end
  return tonumber(r[1])
end

if #ARGV == 2 and string.byte(ARGV[1], 120) == 0 then -- join 0: the last byte of its double
  local INF = 1 / 0 -- not math.huge: see engine.lua
  local TWO63 = 9223372036854775808
  local floor, ceil = math.floor, math.ceil
  local now, _, _, _, _, _, callerVer, validity, regTTL, need, want, maxWait, demand, tau, join =
    unpackd('<ddddddddddddddd', ARGV[1])
  local explicitTime = now > 0
  if not explicitTime then
    local t = redis.call('TIME')
    now = t[1] * 1e6 + t[2] -- what tonumber does, converting each string once, not twice
  end
  local pid = ARGV[2]
  local got = redis.pcall('HMGET', KEYS[1], 'e', pid)
  local v = got[1]
  if join == 0 and got.err == nil and v and #v == 160 and callerVer <= unpackd('<d', v, 81) then
    local kind, stored, max, interval, nxt, burst, warmup, cold, threshold, slope, ver, lc, born,
      slot, lvl, spr, np, lvt, sc, exp = unpackd('<dddddddddddddddddddd', v)
    local bursty = kind ~= 1
    if bursty then kind = 0 end
    local slotLen = floor(regTTL / 2)
    if slotLen < 1 then slotLen = 1 end
    local cur = floor(now / slotLen)
    -- A new slot drops the histogram's counts of the slot two behind
    -- (lease.lua's newSlot). A histogram of another type goes to lease.lua,
    -- which names it, before anything is written.
    local newSlot, hist = cur > slot, nil
    if newSlot and slot >= 0 then
      hist = redis.pcall('HGETALL', KEYS[2])
      if hist.err then slot = -1 end
    end
    if slot >= 0 then
      if newSlot then
        local keep = false
        if cur == slot + 1 then keep = tostring(slot % 2) end
        local old = {}
        for i = 1, #hist, 2 do
          if string.sub(hist[i], 1, 1) ~= keep then old[#old + 1] = hist[i] end
        end
        if #old > 0 then redis.call('HDEL', KEYS[2], unpack(old)) end
        slot, lvt = cur, 0
      elseif cur < slot then
        cur = slot
      end
      if nxt - now > 1e6 + lc then nxt = now + 1e6 + lc end -- lease.lua's clamp
      if maxWait > 1e6 then maxWait = 1e6 end
      local esl, eb, pnext
      local e = got[2]
      if e and #e == 24 then esl, eb, pnext = unpackd('<ddd', e) end
      if pnext == nil then pnext = -INF end

      -- The caller's move in the demand histogram (lease.lua's count).
      local b = -1e9
      if demand > 0 and demand < INF then
        b = floor(math.log(demand) / math.log(2) * 16 + 0.5)
      end
      -- Numbers passed to redis.call are formatted with snprintf by Redis
      -- 7.0: the increments go as strings.
      local created = false
      local decSlot, inc = nil, true
      if esl == cur then
        if eb == b then inc = false else decSlot = cur end
      elseif esl == cur - 1 then
        decSlot = esl
      end
      if decSlot then
        local f = (decSlot % 2 == 0 and '0:' or '1:') .. string.format('%d', eb)
        if redis.call('HINCRBY', KEYS[2], f, '-1') <= 0 then redis.call('HDEL', KEYS[2], f) end
      end
      local moves = 0
      if inc then
        local f = (cur % 2 == 0 and '0:' or '1:') .. string.format('%d', b)
        local c = redis.call('HINCRBY', KEYS[2], f, '1')
        if c <= 0 then redis.call('HDEL', KEYS[2], f) elseif c == 1 then created = true end
        moves = 1
      end
      if moves > 0 and lvt > 0 then lvt = -lvt end

      -- The water level, when a count changed at least REFRESH µs after
      -- the last computation, or a slot began (lease.lua's refresh).
      local rate = 1e6 / interval
      local lt = lvt
      if lt < 0 then lt = -lt end
      if now < lt or (lvt <= 0 and now - lt >= 10000) then
        local h = redis.call('HGETALL', KEYS[2])
        local n, level, remaining = waterLevel(h, rate)
        np, lvl, lvt = n, level, now
        if np < 1 then np = 1 end
        if level == INF and n > 0 then spr = remaining / n else spr = 0 end
        if newSlot then
          sc = sweep(sc, cur) -- entries that no longer count
        end
      end

      local cap, share = want, INF
      if rate < INF then
        if lvl < INF then share = lvl else share = demand + spr end
        if not (share > 0) then share = rate / np end
        cap = floor(share * tau / 1e6)
        if not (cap > 1) then cap = 1 end -- math.max(1, cap), NaN included
      end
      local g = want
      if cap < g then g = cap end
      local grant = need
      if g > need then grant = g end

      -- resync (engine.lua), with coolDownInterval and goMin inline.
      local cdi = interval
      if not bursty and warmup ~= 0 then cdi = warmup / max end
      if now > nxt then
        local s2 = stored + (now - nxt) / cdi
        if max ~= max or s2 ~= s2 then stored = 0 / 0
        elseif max < s2 then stored = max
        else stored = s2 end
        nxt = now
      end
      local lead = 0
      if share < INF and stored > 0 then
        lead = floor(stored / np / share * 1e6)
        if lead ~= lead then lead = 0 end
      end
      if pnext < now - lead then pnext = now - lead end
      if pnext - now > 2 * 1e6 + 10 * tau then pnext = now end

      local wait = nxt
      if pnext > wait then wait = pnext end
      wait = wait - now
      if pnext > now then wait = wait + tau end
      local granted, moment = 0, nil
      if not (wait > maxWait) then
        -- reserve (engine.lua): resync is done; storedPermitsToWaitTime
        -- and satAdd inline. javaLong is Java's (long) cast (made only
        -- when a lease is granted: one closure).
        local function javaLong(x)
          if x ~= x then return 0 end
          if x >= TWO63 then return TWO63 end
          if x <= -TWO63 then return -TWO63 end
          if x >= 0 then return floor(x) end
          return ceil(x)
        end
        moment = nxt
        local spend = grant
        if stored ~= stored or grant ~= grant then spend = 0 / 0
        elseif stored < grant then spend = stored end
        local freshPermits = grant - spend
        local ticks = 0
        local k = spend
        if not bursty then
          local above = stored - threshold
          if above > 0 then
            local take = above
            if take ~= take or k ~= k then take = 0 / 0 elseif k < take then take = k end
            local length = (interval + above * slope) + (interval + (above - take) * slope)
            ticks = javaLong(take * length / 2.0)
            k = k - take
          end
          ticks = ticks + javaLong(interval * k)
        end
        local x = javaLong(freshPermits * interval)
        local cost = ticks + x
        local sum = nxt + cost
        if sum >= TWO63 then sum = TWO63 elseif sum <= -TWO63 then sum = -TWO63 end
        nxt = sum
        stored = stored - spend
        lc = cost
        if share < INF then pnext = pnext + ceil(grant * 1e6 / share) end
        granted = grant
      end

      -- persist (lease.lua): the TTL, the state and the entry in one HSET.
      local fill = max * cdi
      local debt = nxt - now
      if debt < 0 then debt = 0 end
      local ms = ceil((debt + fill + (2 * validity + regTTL)) / 1000)
      -- the cap never below the debt (lease.lua's ttlCap)
      local cap = ceil(debt / 1000) + 2000
      if not (cap > 86400000) then cap = 86400000 end
      if ms ~= ms or ms > cap then ms = cap end
      if ms < 1000 then ms = 1000 end
      local setTTL = explicitTime or now + ms * 1000 > exp or exp - now > (ms + 2000) * 1000
      if setTTL then
        ms = ms + 1000
        if ms > cap then ms = cap end
        exp = now + ms * 1000
      end
      redis.call('HSET', KEYS[1], 'e', packd('<dddddddddddddddddddd', kind, stored, max, interval, nxt,
        burst, warmup, cold, threshold, slope, ver, lc, born,
        slot, lvl, spr, np, lvt, sc, exp), pid, packd('<ddd', cur, b, pnext))
      if setTTL then redis.call('PEXPIRE', KEYS[1], ms) end
      if newSlot or created or explicitTime then
        local dms = ceil(2 * regTTL / 1000)
        if dms < 1000 then dms = 1000 end
        redis.call('PEXPIRE', KEYS[2], dms)
      end

      local aheadBy = nxt
      if pnext > aheadBy then aheadBy = pnext end
      aheadBy = aheadBy - now
      if pnext > now then aheadBy = aheadBy + tau end
      if moment then
        return packd('<ddddddddd', granted, moment - now, aheadBy, moment - now + validity, np, ver,
          1e6 / interval, max, born)
      end
      return packd('<ddddddddd', 0, 0, wait, 0, np, ver, 1e6 / interval, max, born)
    end
  end
end
