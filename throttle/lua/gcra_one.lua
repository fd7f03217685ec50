-- GCRA for one request, the hot path of most users: gcra.lua and meter
-- (prelude.lua) flattened into one script body, with the same operations
-- in the same order (the differential tests hold it to decideGCRA bit for
-- bit). Redis runs a script's body anew on every call, so every closure
-- and table the shared prelude builds costs the server time per decision;
-- this body builds none but its reply. Arguments and reply as one.lua's;
-- the state as prelude.lua's (STATE), checked the same way.
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local now, n, _, burst, _, emission, den, tau, limit, minttl = struct.unpack('>dddddddddd', ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
if now >= 4503599627370496 then -- 2^52, maxMicros in store.go
  error('THROTTLE-ERR time ' .. string.format('%d', now) .. ' µs is out of range', 0)
end
local key = KEYS[1]
local debt = 0
local s = redis.call('GET', key) -- WRONGTYPE: the Go side names the key
if s then
  if #s ~= 24 then
    error('THROTTLE-WRONGTYPE ' .. key .. ': holds a string of ' .. #s .. ' bytes, not a state', 0)
  end
  local tat, rem, c = struct.unpack('>ddd', s)
  if tat ~= floor(tat) or rem ~= floor(rem) or c ~= floor(c) or min(tat, rem, c) < 0
      or max(tat, rem, c) >= 9007199254740992 then
    error('THROTTLE-WRONGTYPE ' .. key .. ': holds a string that is not a state', 0)
  end
  if c > 0 then
    if c ~= den then -- written under another limit: whole µs, rounded up
      if rem > 0 then
        tat = tat + 1
      end
      rem = 0
    end
    local d = tat - now
    if d >= 0 then
      debt = min(d, floor(2251799813685248 / den)) * den + rem -- 2^51: maxDebt
    end
  end
end
if n > burst then
  return {0, limit, floor(max(0, tau - debt) / emission), -1, ceil(debt / den)}
end
local nxt = debt + n * emission
if nxt > tau and n > 0 then
  return {0, limit, floor(max(0, tau - debt) / emission), ceil((nxt - tau) / den), ceil(debt / den)}
end
local reset = ceil(nxt / den)
if n > 0 then
  redis.call('SET', key, struct.pack('>ddd', now + floor(nxt / den), nxt % den, den), 'PX', max(minttl, ceil(reset / 1000)))
end
return {1, limit, floor(max(0, tau - nxt) / emission), 0, reset}
