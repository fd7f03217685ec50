-- One request. KEYS[1]: the key. ARGV[1]: ten little-endian IEEE doubles
-- (packd '<dddddddddd', built by oneArgs in redis_script.go): now
-- (µs; negative: Redis TIME), n, the 7 params (count burst period
-- emission den tau limit), the TTL floor in ms. One binary argument
-- because each decimal one costs the server a string to make and a
-- conversion, on every decision. The script holds one algorithm: its
-- decide entry is the only one.
-- Reply: {allowed, limit, remaining, retry µs (-1: never), reset µs}.
local p = {count = 0, burst = 0, period = 0, emission = 0, den = 0, tau = 0, limit = 0}
local now, n
now, n, p.count, p.burst, p.period, p.emission, p.den, p.tau, p.limit, MINTTL =
  unpackd('<dddddddddd', ARGV[1])
local _, f = next(decide)
return {f(KEYS[1], p, clocknow(now), n)}
