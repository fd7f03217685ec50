-- lease.lua: the distributed limiter's protocol, appended to engine.lua.
--
-- KEYS[1]  the state hash     ratelimit:{name}:state    (field 'e': one
--                             smooth engine, plus the cached fair share: see
--                             below; and the registry: field 'p:' .. process
--                             id -> slot, bucket, pnext, three packed doubles)
-- KEYS[2]  the demand counts  ratelimit:{name}:demand   ("parity:bucket" ->
--                             processes)
-- Both share the hash tag {name}, so they live in one cluster slot. The
-- registry lives in the state's hash so that one HMGET reads, and one HSET
-- writes, everything a lease needs.
--
-- Every lease does O(1) work in the number of processes. Time is cut into
-- registry slots of regttl/2. A process counts in the fleet if it called
-- in the current slot or the one before: each call moves its entry (and
-- its count in the demand histogram) to the current slot, and the counts
-- of a slot two behind are dropped at the first call of a new slot, so a
-- silent process stops counting between regttl/2 and regttl after its
-- last call, with no scan of the registry. The histogram counts processes
-- per demand bucket (1/16 octave: a demand is rounded to within 2.2 %);
-- the water level of the max-min fair share is computed from it, and
-- cached in the state, at most every REFRESH µs and only when some count
-- changed since (or a slot began). Dead registry entries (they no longer
-- count) are swept a few at a time with HSCAN.
--
-- hot.lua, which runs before this file, answers the common lease with the
-- same arithmetic and no closures; everything else comes here.
--
-- ARGV, the long form (all numbers as decimal strings; a lease may also
-- come in the compact form: ARGV[1] the numbers of 2, 3 (0 for 'b', 1 for
-- 'w'), 4–8, 10–16 and 18 packed as 15 little-endian doubles, followed by
-- the unit's bytes, ARGV[2] 'p:' .. pid):
--  1 op        'lease' | 'refund' | 'setrate'
--  2 now       µs on the Redis clock; 0 means "read TIME" (anything else is
--              for tests only)
--  3 kind      'b' (bursty) or 'w' (warming up)
--  4 rate      the caller's rate, used only to (re)create the state
--  5 burst     seconds of stored permits (bursty)
--  6 warmup    µs (warming up)
--  7 cold      cold factor (warming up)
--  8 ver       the config version the caller knows
--  9 pid       the caller's process id
-- 10 validity  µs a lease stays usable after its permits become usable
--              (the reply's validity counts from the script's now)
-- 11 regttl    µs after which a silent process leaves the registry
-- lease:   12 need (permits that must be in the lease)  13 want (the lease
--          size asked for)  14 maxwait µs  15 demand permits/s  16 tau µs
--          17 unit (what a permit stands for: recorded when the state is
--          made)  18 join: '0' nothing, '1' reply with the stored kind and
--          unit (a limiter's first leases), '2' the same, and refuse to
--          join a state whose rate, kind or unit differs from the caller's
-- refund:  12 permits  13 the version they were leased under  14 leave (1
--          removes the caller from the registry)  15 the state's birth
--          time they were leased from
-- setrate: 12 the new rate
--
-- Reply: {granted, wait µs, ahead µs, validity µs, processes, ver, rate,
-- maxPermits, born} (+ {kind, unit} when join is not '0', + 'refused'
-- when join is '2' and the name holds another limiter): integers, and
-- the rate and maxPermits as packed doubles, so that no precision is lost. ahead
-- is how far the caller's next lease is pushed back (by the shared debt or
-- its own fair-share clock): a lease with maximum wait w can be granted
-- after ahead - w, its retry-after. born identifies this incarnation of
-- the state (its creation time), so that a refund never reaches a state
-- recreated after the permits were leased.

-- MAX_WAIT caps how far ahead a lease may be booked (µs). A caller willing
-- to wait longer asks again after the retry-after. It also bounds the legitimate
-- debt, which is what lets the script detect a clock that stepped back.
local MAX_WAIT = 1e6
local MIN_TTL_MS = 1000
local MAX_TTL_MS = 86400000
-- REFRESH is the longest the cached water level is used (µs): one lease in
-- ten milliseconds reads the demand histogram, whatever the fleet's size.
local REFRESH = 10000
-- BUCKETS is the demand histogram's resolution, in buckets per octave: a
-- reported demand counts as 2^(k/16) for the nearest k, within 2.2 %.
local BUCKETS = 16
-- The registry's sweep and the water filling are hot.lua's sweep and
-- internal/fairshare's waterLevel, defined before this file.
-- The fleet's numbers, packed after the engine's in the state: the
-- registry slot the demand counts belong to (-1: none yet), the cached
-- water level (+Inf when the fleet wants less than the rate), the spare
-- rate per process in that case, the process count, when they were
-- computed (lvt: negated once a count has changed since, 0 to recompute at
-- the next lease), the sweep's HSCAN cursor, and until when the state's TTL
-- lasts (µs; the TTL is set again only when a lease needs it longer).
local FLEET = {'slot', 'lvl', 'spr', 'np', 'lvt', 'sc', 'exp'}
-- ZERO is the bucket of a process that has not measured its demand yet:
-- 2^(ZERO/BUCKETS) is 0.
local ZERO = -1e9

-- A lease comes in the compact form (two arguments: the numbers packed
-- and the unit, 'p:' .. pid; see hot.lua), refund and setrate in the long
-- one: A is the long form either way.
local A = ARGV
if #ARGV == 2 then
  local now0, kind, rate, burst, warmup, cold, ver, validity, regttl, need, want, maxWait, demand, tau, join =
    unpackd('<ddddddddddddddd', ARGV[1])
  if kind == 1 then kind = 'w' else kind = 'b' end
  A = {'lease', now0, kind, rate, burst, warmup, cold, ver, string.sub(ARGV[2], 3), validity, regttl, need, want,
    maxWait, demand, tau, string.sub(ARGV[1], 121), string.format('%d', join)}
end
local op = A[1]
local now = tonumber(A[2])
-- With Redis's own time, the TTLs run on the clock the script reads, so
-- the script knows how long they last; with an explicit (test) time it
-- does not, and sets them on every call.
local explicitTime = now > 0
if now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1e6 + tonumber(t[2])
end
local callerRate, callerVer = dec(A[4]), tonumber(A[8])
local pid = 'p:' .. A[9]
local validity, regTTL = tonumber(A[10]), tonumber(A[11])
local slotLen = math.max(1, math.floor(regTTL / 2))

-- Registry: refuse a wrong-typed key with a clear error, before anything
-- is written (PEXPIRE would otherwise put a TTL on a foreign key). A lease
-- learns the registry's type from its HGET below and the histogram's from
-- its HGETALL; a refund or setrate, which are rare, asks TYPE.
if op ~= 'lease' then
  local rt = redis.call('TYPE', KEYS[2])['ok']
  if rt ~= 'none' and rt ~= 'hash' then return wrongType(KEYS[2], 'registry') end
end

-- parseEntry reads a registry entry (slot, bucket, pnext); nil if absent
-- or garbled. pnext is the process's own fair-share clock (see below).
local function parseEntry(v)
  if not v or #v ~= 24 then return nil end
  local sl, b, pn = unpackd('<ddd', v)
  return sl, b, pn
end

-- count moves a process in or out of the demand histogram of a slot. An
-- empty bucket is deleted, so that the histogram holds only the buckets
-- some process is in. A bucket made anew may be a histogram made anew, so
-- the histogram's TTL is set again (created).
local created = false
local function count(sl, b, by)
  local f = (sl % 2) .. ':' .. string.format('%d', b)
  local c = redis.call('HINCRBY', KEYS[2], f, by)
  if c <= 0 then redis.call('HDEL', KEYS[2], f) elseif c == by then created = true end
end

-- dirty marks the cached level as out of date: recomputed REFRESH µs after
-- it was computed (at once if that is past).
local function dirty(s)
  if s.lvt > 0 then s.lvt = -s.lvt end
end

-- leave removes the caller from the registry and from the counts of the
-- slot it is counted in (the state's slot or the one before).
local function leave(s)
  local sl, b = parseEntry(redis.call('HGET', KEYS[1], pid))
  if sl ~= nil and s.slot >= 0 and (sl == s.slot or sl == s.slot - 1) then
    count(sl, b, -1)
    s.lvt = 0 -- the next lease recomputes the level without the caller
  end
  redis.call('HDEL', KEYS[1], pid)
end

local s = loadState(KEYS[1], FLEET)
local fresh = false
if s == nil then
  if op == 'refund' then
    -- Nothing to give back to: the state the permits came from (and the
    -- registry in it) is gone.
    return {0, 0, 0, 0, 0, 0, encDouble(callerRate), encDouble(0), 0}
  end
  s = newState(A[3], dec(A[5]), tonumber(A[6]), dec(A[7]))
  s.ver, s.lc, s.born = math.max(1, callerVer), 0, now
  setRate(s, callerRate, now)
  s.slot, s.lvl, s.spr, s.np, s.lvt, s.sc, s.exp = -1, INF, 0, 1, -INF, 0, 0
  s.unit = A[17]
  fresh = true
elseif callerVer > s.ver and op ~= 'refund' then
  -- The state was lost and recreated by a process that knew an older
  -- configuration: the newer one wins, applied once.
  setRate(s, callerRate, now)
  s.ver = callerVer
  s.lvt = 0 -- the level is a share of the old rate
end

-- A clock that stepped back leaves next absurdly far ahead; legitimate debt
-- never exceeds MAX_WAIT plus the cost of the last reservation, so next is
-- brought back to that much debt, and no less: a step back of a
-- millisecond must not forgive the second of debt booked before it.
if s.next - now > MAX_WAIT + s.lc then
  s.next = now + MAX_WAIT + s.lc
end

-- ttlCap is the longest TTL the state gets: MAX_TTL_MS, but never less
-- than its debt and two seconds (at less than a permit a day, a lapsed
-- state would forgive what was booked).
local function ttlCap()
  local cap = math.ceil(math.max(s.next - now, 0) / 1000) + 2000
  if not (cap > MAX_TTL_MS) then cap = MAX_TTL_MS end
  return cap
end

local function ttlMs(extra)
  local fill = s.max * coolDownInterval(s)
  local debt = math.max(s.next - now, 0)
  local ms = math.ceil((debt + fill + extra) / 1000)
  if ms ~= ms or ms > ttlCap() then ms = ttlCap() end
  if ms < MIN_TTL_MS then ms = MIN_TTL_MS end
  return ms
end

-- persist writes the state (and the caller's registry entry, if given)
-- and makes sure its TTL lasts as long as this call needs. The TTL is set
-- with a second to spare, so that most leases find it long enough and set
-- nothing.
local function persist(entry)
  local ms = ttlMs(2 * validity + regTTL)
  local setTTL = explicitTime or now + ms * 1000 > s.exp or s.exp - now > (ms + 2000) * 1000
  if setTTL then
    ms = math.min(ms + 1000, ttlCap())
    s.exp = now + ms * 1000
  end
  saveState(KEYS[1], s, FLEET, entry and pid, entry)
  if setTTL then redis.call('PEXPIRE', KEYS[1], ms) end
end

-- The demand histogram lives 2 × regttl after a new slot began or a bucket
-- was made: by then nothing in it counts any more, and any lease after
-- that begins a new slot, which sets the TTL again.
local function expireDemand()
  redis.call('PEXPIRE', KEYS[2], math.max(MIN_TTL_MS, math.ceil(2 * regTTL / 1000)))
end

-- Integers go back as integer replies (every one is a whole number of µs
-- or a count, below 2^53), the rate and the capacity as packed doubles.
local joined -- {kind, unit} of the state, for a limiter's first leases
local function reply(granted, wait, aheadBy, valid, procs)
  local r = {granted, wait, aheadBy, valid, procs, s.ver, encDouble(rateOf(s)), encDouble(s.max), s.born}
  if joined then
    r[10], r[11] = joined[1], joined[2]
  end
  return r
end

if op == 'setrate' then
  setRate(s, dec(A[12]), now)
  s.ver = s.ver + 1
  s.lvt = 0 -- the level is a share of the old rate
  persist()
  return reply(0, 0, 0, 0, 0)
end

if op == 'refund' then
  local n, lv = tonumber(A[12]), tonumber(A[13])
  local refunded = 0
  -- Only permits debited from this very state, under its current config:
  -- a state recreated after FLUSHALL never saw them.
  if lv == s.ver and tonumber(A[15]) == s.born and n > 0 then
    resync(s, now)
    -- Roll nextFreeTicket back by the permits' price at the stable rate,
    -- never before now: time that has passed cannot be given back.
    local price = javaLong(n * s.interval)
    local back = math.min(price, s.next - now)
    if back > 0 then
      s.next = s.next - back
      -- The whole price (truncated to µs) is n permits, though back /
      -- interval is a hair below n when the price is not whole µs.
      if s.interval > 0 and back < price then refunded = math.floor(back / s.interval) else refunded = n end
    end
  end
  if A[14] == '1' then leave(s) end
  persist()
  return reply(refunded, 0, 0, 0, 0)
end

if op ~= 'lease' then
  return error({err = 'ERR ratelimit: unknown op ' .. tostring(op)})
end

local need, want, maxWait = tonumber(A[12]), tonumber(A[13]), tonumber(A[14])
local demand, tau = dec(A[15]), tonumber(A[16])
if maxWait > MAX_WAIT then maxWait = MAX_WAIT end

-- A limiter's first leases learn what the name holds: its kind and unit
-- (the rate is in every reply). Asked to, refuse to join a limiter of
-- another rate, kind or unit, before anything is written: two programs
-- that picked the same name by accident must not share one limit.
local join, unit = A[18] or '0', A[17] or ''
if join ~= '0' then
  local storedUnit = unit
  if not fresh then storedUnit = redis.call('HGET', KEYS[1], 'unit') or '' end
  joined = {s.kind, storedUnit}
  local r = rateOf(s)
  local sameRate = r == callerRate or
    (r < INF and callerRate < INF and math.abs(r - callerRate) <= 1e-9 * math.max(r, callerRate))
  if join == '2' and (not sameRate or s.kind ~= A[3] or storedUnit ~= unit) then
    -- Nothing granted, written or registered; the reply says what the
    -- name holds, and 'refused'.
    return {0, 0, 0, 0, 0, s.ver, encDouble(r), encDouble(s.max), s.born, s.kind, storedUnit, 'refused'}
  end
end

-- The caller's registry entry: one HGET, whatever the fleet's size.
local esl, eb, pnext = parseEntry(redis.call('HGET', KEYS[1], pid))
if pnext == nil then pnext = -INF end -- new: as if idle for long
if fresh then esl = nil end -- counts from before the state was lost are gone

-- The registry slot. A new one drops the counts of the slot two behind
-- (all of them after a silence of more than a slot): the processes that
-- last called then stop counting. A clock that stepped back keeps the
-- latest slot.
local cur = math.floor(now / slotLen)
local newSlot = s.slot < 0 or cur > s.slot
if newSlot then
  local h = redis.pcall('HGETALL', KEYS[2])
  if h.err then return wrongType(KEYS[2], 'registry') end
  local keep = false
  if s.slot >= 0 and cur == s.slot + 1 then keep = tostring(s.slot % 2) end
  local old = {}
  for i = 1, #h, 2 do
    if string.sub(h[i], 1, 1) ~= keep then old[#old + 1] = h[i] end
  end
  if #old > 0 then redis.call('HDEL', KEYS[2], unpack(old)) end
  s.slot = cur
  s.lvt = 0
elseif cur < s.slot then
  cur = s.slot
end

-- Count the caller in the current slot, under its demand's bucket: it
-- moves out of the previous slot (or out of its old bucket) at most once
-- per slot or demand change, so most leases write nothing here.
local b = ZERO
if demand > 0 and demand < INF then
  b = math.floor(math.log(demand) / math.log(2) * BUCKETS + 0.5)
end
if esl == cur then
  if eb ~= b then
    count(cur, eb, -1)
    count(cur, b, 1)
    dirty(s)
  end
elseif esl == cur - 1 then
  count(esl, eb, -1)
  count(cur, b, 1)
  dirty(s)
else
  count(cur, b, 1)
  dirty(s)
end

-- Max-min fair share of the rate (water filling) over the histogram of
-- the processes counted in the current and the previous slot: processes
-- that want less than an equal split get what they want; the rest split
-- what is left; capacity nobody wants is spread evenly. O(buckets), and
-- done at most every REFRESH µs, and only when a count changed since; the
-- result is cached in the state. lvt is when it was computed, negated
-- when a count has changed since.
local rate = rateOf(s)
local lt = math.abs(s.lvt)
if fresh or now < lt or (s.lvt <= 0 and now - lt >= REFRESH) then
  local h = redis.pcall('HGETALL', KEYS[2])
  if h.err then return wrongType(KEYS[2], 'registry') end
  local n, level, remaining = waterLevel(h, rate)
  s.np, s.lvl, s.lvt = math.max(n, 1), level, now
  if level == INF and n > 0 then s.spr = remaining / n else s.spr = 0 end
  if newSlot then
    -- Sweep a few registry entries that no longer count (the caller's
    -- own is written again below).
    s.sc = sweep(s.sc, cur)
  end
end
local np = s.np

local cap, share = want, INF
if rate < INF then
  if s.lvl < INF then
    -- Contended: the fair level. A process that wants less only asks for
    -- less (its lease is sized by its demand), so the level is merely its
    -- ceiling; holding it to its noisy demand estimate would starve it.
    share = s.lvl
  else
    share = demand + s.spr
  end
  -- A process that has not measured its demand yet gets an equal split.
  if not (share > 0) then share = rate / np end
  cap = math.max(1, math.floor(share * tau / 1e6))
end
local grant = math.max(need, math.min(want, cap))

-- Two clocks gate a lease: the shared nextFreeTicket (the global rate) and
-- the process's own pnext, which advances by grant / share. Without the
-- second, whoever asks first after a backoff wins every time, and a fleet
-- under overload is served by the nearest and fastest processes.
-- Each process's clock may lag now by its part of the permits stored in
-- the shared bucket, so that an idle fleet can still spend its burst at
-- once; otherwise a process may book no faster than its share, and a
-- process that fell behind (others asked first) gets no credit for it:
-- credit would let everyone book far ahead and turn the shared queue into
-- latency.
resync(s, now)
local lead = 0
if share < INF and s.stored > 0 then
  lead = math.floor(s.stored / np / share * 1e6)
  if lead ~= lead then lead = 0 end
end
if pnext < now - lead then pnext = now - lead end
-- The same guard as for nextFreeTicket: a fair-share clock far ahead can
-- only come from a clock that stepped back.
if pnext - now > 2 * MAX_WAIT + 10 * tau then pnext = now end
-- A process that is ahead of its own clock (it has had its share) books
-- one lease duration less far into the shared queue than the others: when
-- the fleet's demand matches the rate exactly, the queue stays about one
-- lease ahead, and without this priority a process below its share would
-- lose half its races against the processes that ask at every
-- opportunity. The caller's maximum wait is never exceeded. ahead(pn) is
-- the caller's distance to its next lease: a lease with maximum wait w can
-- be granted once ahead(pn) <= w.
local function ahead(pn)
  local a = math.max(s.next, pn) - now
  if pn > now then a = a + tau end
  return a
end
local function finish()
  persist(packd('<ddd', cur, b, pnext))
  if newSlot or created or explicitTime then expireDemand() end
end
local wait = ahead(pnext)
if wait > maxWait then
  finish()
  return reply(0, 0, wait, 0, np)
end
local moment, cost = reserve(s, grant, now)
s.lc = cost
if share < INF then
  pnext = pnext + math.ceil(grant * 1e6 / share)
end
finish()
-- ahead tells the caller when its next lease can be granted at the
-- earliest (with a maximum wait of w: after ahead - w), so that it does
-- not ask in vain.
return reply(grant, moment - now, ahead(pnext), moment - now + validity, np)
