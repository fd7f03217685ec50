-- lease.lua: the distributed limiter's protocol, appended to engine.lua.
--
-- KEYS[1]  the state hash  ratelimit:{name}:state  (one smooth engine)
-- KEYS[2]  the registry    ratelimit:{name}:procs  (process id -> "lastSeen demand pnext")
-- Both share the hash tag {name}, so they live in one cluster slot.
--
-- ARGV (all numbers as decimal strings):
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
-- refund:  12 permits  13 the version they were leased under  14 leave (1
--          removes the caller from the registry)  15 the state's birth
--          time they were leased from
-- setrate: 12 the new rate
--
-- Reply: {granted, wait µs, ahead µs, validity µs, processes, ver, rate,
-- maxPermits, born}, every element a string so that no precision is lost. ahead
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

local op = ARGV[1]
local now = tonumber(ARGV[2])
if now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1e6 + tonumber(t[2])
end
local callerRate, callerVer = dec(ARGV[4]), tonumber(ARGV[8])
local pid = ARGV[9]
local validity, regTTL = tonumber(ARGV[10]), tonumber(ARGV[11])

-- Registry: refuse a wrong-typed key with a clear error, before anything
-- is written (PEXPIRE would otherwise put a TTL on a foreign key). A lease
-- learns the type from its HGETALL below; a refund or setrate, which are
-- rare, asks TYPE.
if op ~= 'lease' then
  local rt = redis.call('TYPE', KEYS[2])['ok']
  if rt ~= 'none' and rt ~= 'hash' then return wrongType(KEYS[2], 'registry') end
end

local s = loadState(KEYS[1])
if s == nil then
  if op == 'refund' then
    -- Nothing to give back to: the state the permits came from is gone.
    if ARGV[14] == '1' then redis.call('HDEL', KEYS[2], pid) end
    return {'0', '0', '0', '0', '0', '0', enc(callerRate), '0', '0'}
  end
  s = newState(ARGV[3], dec(ARGV[5]), tonumber(ARGV[6]), dec(ARGV[7]))
  s.ver, s.lc, s.born = math.max(1, callerVer), 0, now
  setRate(s, callerRate, now)
elseif callerVer > s.ver and op ~= 'refund' then
  -- The state was lost and recreated by a process that knew an older
  -- configuration: the newer one wins, applied once.
  setRate(s, callerRate, now)
  s.ver = callerVer
end

-- A clock that stepped back leaves next absurdly far ahead; legitimate debt
-- never exceeds MAX_WAIT plus the cost of the last reservation.
if s.next - now > MAX_WAIT + s.lc then
  s.next = now + s.lc
end

local function ttlMs(extra)
  local fill = s.max * coolDownInterval(s)
  local debt = math.max(s.next - now, 0)
  local ms = math.ceil((debt + fill + extra) / 1000)
  if ms ~= ms or ms > MAX_TTL_MS then ms = MAX_TTL_MS end
  if ms < MIN_TTL_MS then ms = MIN_TTL_MS end
  return ms
end

local function persist()
  saveState(KEYS[1], s)
  redis.call('PEXPIRE', KEYS[1], ttlMs(2 * validity + regTTL))
  -- A no-op when the registry does not exist (a refund that left it
  -- empty): no need to ask EXISTS first. Its type has been checked.
  redis.call('PEXPIRE', KEYS[2], math.max(MIN_TTL_MS, math.ceil(2 * regTTL / 1000)))
end

local function reply(granted, wait, aheadBy, valid, procs)
  return {string.format('%d', granted), string.format('%d', wait), string.format('%d', aheadBy),
    string.format('%d', valid), tostring(procs), string.format('%d', s.ver),
    enc(rateOf(s)), encField(s, 'max'), string.format('%d', s.born)}
end

if op == 'setrate' then
  setRate(s, dec(ARGV[12]), now)
  s.ver = s.ver + 1
  persist()
  return reply(0, 0, 0, 0, 0)
end

if op == 'refund' then
  local n, lv = tonumber(ARGV[12]), tonumber(ARGV[13])
  local refunded = 0
  -- Only permits debited from this very state, under its current config:
  -- a state recreated after FLUSHALL never saw them.
  if lv == s.ver and tonumber(ARGV[15]) == s.born and n > 0 then
    resync(s, now)
    -- Roll nextFreeTicket back by the permits' price at the stable rate,
    -- never before now: time that has passed cannot be given back.
    local back = math.min(javaLong(n * s.interval), s.next - now)
    if back > 0 then
      s.next = s.next - back
      if s.interval > 0 then refunded = math.floor(back / s.interval) else refunded = n end
    end
  end
  if ARGV[14] == '1' then redis.call('HDEL', KEYS[2], pid) end
  persist()
  return reply(refunded, 0, 0, 0, 0)
end

if op ~= 'lease' then
  return error({err = 'ERR ratelimit: unknown op ' .. tostring(op)})
end

local need, want, maxWait = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local demand, tau = dec(ARGV[15]), tonumber(ARGV[16])
if maxWait > MAX_WAIT then maxWait = MAX_WAIT end

-- Registry: each entry is "lastSeen demand pnext", where pnext is the
-- process's own virtual clock (see below). Record the caller, forget
-- processes silent for longer than regTTL, and collect the live demands.
local function parseEntry(v)
  local seen, d, pn = string.match(v or '', '^(%S+) (%S+) (%S+)$')
  seen, d, pn = tonumber(seen or ''), dec(d or ''), tonumber(pn or '')
  if seen == nil or d == nil or pn == nil or d ~= d or d < 0 then return nil end
  return seen, d, pn
end
local all = redis.pcall('HGETALL', KEYS[2])
if all.err then return wrongType(KEYS[2], 'registry') end
local pnext = -INF -- new: as if idle for long
local live, dead = {}, {}
local found = false
for i = 1, #all, 2 do
  local seen, d, pn = parseEntry(all[i + 1])
  if all[i] == pid then
    found = true
    if pn ~= nil then pnext = pn end
    live[#live + 1] = {id = pid, d = demand}
  elseif seen == nil or now - seen > regTTL then
    dead[#dead + 1] = all[i]
  else
    live[#live + 1] = {id = all[i], d = d}
  end
end
if not found then live[#live + 1] = {id = pid, d = demand} end
if #dead > 0 then redis.call('HDEL', KEYS[2], unpack(dead)) end

-- Max-min fair share of the rate (water filling): processes that want less
-- than an equal split get what they want; the rest split what is left;
-- capacity nobody wants is spread evenly.
local rate = rateOf(s)
local cap, share = want, INF
if rate < INF then
  table.sort(live, function(a, b) return a.d < b.d end)
  local level, remaining = INF, rate
  for i = 1, #live do
    local l = remaining / (#live - i + 1)
    if live[i].d > l then
      level = l
      break
    end
    remaining = remaining - live[i].d
  end
  if level == INF then
    share = demand + remaining / #live
  else
    -- Contended: the fair level. A process that wants less only asks for
    -- less (its lease is sized by its demand), so the level is merely its
    -- ceiling; holding it to its noisy demand estimate would starve it.
    share = level
  end
  -- A process that has not measured its demand yet gets an equal split.
  if not (share > 0) then share = rate / #live end
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
-- latency. ahead(pn) is the caller's distance to its next lease: a lease
-- with maximum wait w can be granted once it is <= w.
resync(s, now)
local lead = 0
if share < INF and s.stored > 0 then
  lead = math.floor(s.stored / #live / share * 1e6)
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
-- The registry entry: now is an integer (TIME or an int64 argument), and
-- the demand is the caller's own decimal string, which reads back as the
-- same double; formatting either again would cost about half a µs each.
local function entry(pn)
  return string.format('%d', now) .. ' ' .. ARGV[15] .. ' ' .. enc(pn)
end
local wait = ahead(pnext)
if wait > maxWait then
  redis.call('HSET', KEYS[2], pid, entry(pnext))
  persist()
  return reply(0, 0, wait, 0, #live)
end
local moment, cost = reserve(s, grant, now)
s.lc = cost
if share < INF then
  pnext = pnext + math.ceil(grant * 1e6 / share)
end
redis.call('HSET', KEYS[2], pid, entry(pnext))
persist()
-- ahead tells the caller when its next lease can be granted at the
-- earliest (with a maximum wait of w: after ahead - w), so that it does
-- not ask in vain.
return reply(grant, moment - now, ahead(pnext), moment - now + validity, #live)
