-- Adds hits to the reference's fixed-window counters, all in one step.
--
-- KEYS[i]: the i-th window's counter (its key ends in the window's start).
-- ARGV[1]: 1 to count only admitted hits (a sum above its limit is not
--          written), 0 to count every hit as envoyproxy/ratelimit does.
-- ARGV[3i-1], ARGV[3i], ARGV[3i+1]: the i-th window's hits, its limit and
--          the seconds until it ends (its counter's TTL).
-- Returns, per window, the count after the hits (or as if they had been
-- added, when they were not), or -1 for a key that holds something other
-- than a counter: the keys may be several calls' (see batch.go), and one
-- call's bad key must not fail the others. An error that is the server's
-- condition, not one key's (OOM: out of memory under maxmemory and
-- noeviction; READONLY, MISCONF, NOREPLICAS: it refuses writes now), is
-- the script's answer, for every call of the batch. The TTL is set only when the
-- counter is created: one EXPIRE per window, not one per hit. INCRBY is
-- given the hits as they came (a string): Lua prints a number of 10^17 or
-- more in exponent notation, which INCRBY refuses.
local rpcall, tonumber, match = redis.pcall, tonumber, string.match
local only_admitted = ARGV[1] == '1'
-- serverwide: whether a command's error reply is a server's that refuses
-- every write now, whatever the key.
local function serverwide(e)
  local code = match(e.err or '', '^%u+')
  return code == 'OOM' or code == 'READONLY' or code == 'MISCONF' or code == 'NOREPLICAS'
end
local out = {}
for i, key in ipairs(KEYS) do
  local hits = tonumber(ARGV[3 * i - 1])
  local count
  if hits == 0 or only_admitted then
    local cur = rpcall('GET', key)
    if type(cur) == 'table' then
      if serverwide(cur) then
        return cur
      end
      count = -1
    else
      cur = tonumber(cur or '0')
      if cur == nil then
        count = -1
      elseif hits == 0 then
        count = cur
      else
        count = cur + hits
        if count <= tonumber(ARGV[3 * i]) then
          redis.call('INCRBY', key, ARGV[3 * i - 1])
          if cur == 0 then
            redis.call('EXPIRE', key, ARGV[3 * i + 1])
          end
        end
      end
    end
  else
    count = rpcall('INCRBY', key, ARGV[3 * i - 1])
    if type(count) == 'table' then
      if serverwide(count) then
        return count
      end
      count = -1
    elseif count == hits then
      redis.call('EXPIRE', key, ARGV[3 * i + 1])
    end
  end
  out[i] = count
end
return out
