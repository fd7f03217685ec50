-- packd and unpackd pack and unpack little-endian IEEE doubles ('<d',
-- '<ddd', ...: the only formats the scripts use) as struct.pack and
-- struct.unpack do, with the same bytes and results: unpackd(fmt, s [, i])
-- returns the numbers and then the position after the last byte read.
-- Redis has the struct library; miniredis and some Redis-compatible
-- servers do not, and reading the missing global is an error there. So
-- whether it exists is asked once per script run, and without it the
-- pure-Lua pair below does the same work: a state written by one path is
-- read by the other. (A NaN has no payload or sign the pure path can see:
-- it writes the quiet NaN 0x7ff8000000000000. No script stores a NaN.)
local purePack, pureUnpack
do
  local floor, frexp, ldexp, char, byte = math.floor, math.frexp, math.ldexp, string.char, string.byte
  -- 1 / 0, not math.huge: gopher-lua (miniredis) sets math.huge to the
  -- largest finite double.
  local huge, two52 = 1 / 0, 2 ^ 52
  local function count(fmt)
    local n = #fmt - 1
    if n < 1 or fmt ~= '<' .. string.rep('d', n) then error('ERR redisscript: unsupported pack format ' .. fmt, 0) end
    return n
  end
  local function enc(x)
    local sign, e, m = 0, 0, 0
    if x ~= x then
      e, m = 2047, 2 ^ 51
    else
      if x < 0 or (x == 0 and 1 / x < 0) then sign, x = 128, -x end
      if x == huge then
        e = 2047
      elseif x ~= 0 then
        local f, ex = frexp(x) -- x = f * 2^ex, 0.5 <= f < 1
        e = ex + 1022
        if e <= 0 then
          e, m = 0, ldexp(x, 1074) -- subnormal: x in units of 2^-1074
        else
          m = ldexp(f, 53) - two52 -- the 52 bits after the leading 1
        end
      end
    end
    local b1 = m % 256; m = floor(m / 256)
    local b2 = m % 256; m = floor(m / 256)
    local b3 = m % 256; m = floor(m / 256)
    local b4 = m % 256; m = floor(m / 256)
    local b5 = m % 256; m = floor(m / 256)
    local b6 = m % 256; m = floor(m / 256)
    return char(b1, b2, b3, b4, b5, b6, (e % 16) * 16 + m, sign + floor(e / 16))
  end
  local function dec(s, i)
    local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, i, i + 7)
    if not b8 then error('ERR redisscript: data string too short', 0) end
    local neg = b8 >= 128
    if neg then b8 = b8 - 128 end
    local e = b8 * 16 + floor(b7 / 16)
    local m = ((((((b7 % 16) * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 256 + b2) * 256 + b1
    local x
    if e == 2047 then
      if m ~= 0 then return 0 / 0 end
      x = huge
    elseif e == 0 then
      x = ldexp(m, -1074)
    else
      x = ldexp(m + two52, e - 1075)
    end
    -- Unary minus, not a product with -1: some Lua VMs (gopher-lua, in
    -- miniredis) lose the sign of -1 * 0.
    if neg then x = -x end
    return x
  end
  purePack = function(fmt, ...)
    local n, out = count(fmt), {}
    for k = 1, n do out[k] = enc(select(k, ...)) end
    return table.concat(out)
  end
  pureUnpack = function(fmt, s, i)
    local n, out = count(fmt), {}
    i = i or 1
    for k = 1, n do
      out[k] = dec(s, i)
      i = i + 8
    end
    out[n + 1] = i
    return unpack(out, 1, n + 1)
  end
end
local packd, unpackd = purePack, pureUnpack
do
  local ok, st = pcall(function() return struct end)
  if ok and type(st) == 'table' and st.pack and st.unpack then packd, unpackd = st.pack, st.unpack end
end
