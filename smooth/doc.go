// Package smooth is the arithmetic of a smooth rate limiter, the model behind
// Guava's SmoothRateLimiter, with nothing else around it: no clock, no lock,
// no goroutine. Every method takes the current time as an argument, so a
// schedule is a pure function of its inputs and can be tested, plotted or
// replayed without sleeping. Package ratelimit wraps it with a clock and a
// mutex; most programs want that package, not this one.
//
// # Time is counted in ticks
//
// The engine's clock is an int64 count of ticks from an origin chosen by the
// caller (ratelimit uses "since the limiter was made"). The length of a tick
// is fixed when the engine is built, through ticksPerSecond. Package
// ratelimit uses 1 ns ticks by default (Nanosecond) and 1 µs ticks in its
// Guava mode (Microsecond). It is the same code either way; only the
// length of a tick changes. Every price is truncated to whole ticks,
// once per reservation, as Guava does with microseconds. With microsecond
// ticks that truncation is visible: at 80 000 permits per second a permit
// costs 12.5 µs but books 12, so the limiter runs about 4% fast, and above
// a million permits per second a single permit books nothing at all. With
// nanosecond ticks the same limiter books 12.5 µs, and the error of a
// truncation stays below one nanosecond per call. The Guava mode exists so
// that results can be compared with Guava's bit for bit.
//
// # What the engine remembers
//
// A limiter that only remembered "the last request was at t" would be
// forgetful in an unhelpful way: after an hour of silence it would treat the
// next burst exactly as if it had come after a busy second. The engine keeps
// two numbers instead.
//
// nextFreeTicket is the moment from which the next request may proceed. When
// the limiter is busy it lies in the future; when it has been idle it lies in
// the past, and the gap between it and now is the unused time.
//
// storedPermits is that unused time turned into permits, up to maxPermits.
// Whenever the engine is touched at a time now later than nextFreeTicket, it
// first converts the gap: it adds (now - nextFreeTicket) / coolDownInterval
// permits to the store, caps the store at maxPermits, and moves
// nextFreeTicket up to now. This is resync. A now earlier than
// nextFreeTicket (a request in a busy period, or a clock that stepped back)
// changes nothing, so no permit is ever created by time running backwards.
//
// # The next caller pays
//
// A reservation of n permits at now (Reserve) does three things: resync;
// note nextFreeTicket as the moment the caller may go; and push
// nextFreeTicket forward by the price of the n permits. The caller therefore
// waits only for the debt that earlier callers left behind, never for its
// own permits. Its own price is paid by whoever comes next.
//
// This is deliberate. A caller that asks an idle limiter for 100 permits at
// 1 per second has nothing to wait for: the limiter has been idle, so letting
// the request start now and holding back the following ones by 100 s
// respects the rate just as well, and the work overlaps the wait instead of
// following it. The price is that the limiter cannot refuse a request because
// it is large; it can only make the next one wait. CanAcquire, the test
// behind ratelimit's TryAcquire, accordingly looks at nextFreeTicket and not
// at the number of permits asked for.
//
// Stored permits are spent before fresh ones. The price of a reservation is
// the price of the stored permits it takes plus stableInterval (ticks per
// permit at the stable rate) for each fresh permit.
//
// # Bursty and warming-up: what a stored permit costs
//
// Idle time can mean two opposite things. For a network link it means spare
// capacity, and stored permits should be handed out at once: that is the
// Bursty kind. Its stored permits are free, it stores up to
// maxBurstSeconds × rate of them, and it earns them back at the stable rate
// (coolDownInterval = stableInterval). A maxBurstSeconds of 0 makes a strict
// metronome.
//
// For a service with caches, connection pools or a JIT, idle time means the
// opposite: the server has gone cold and the first requests after a pause are
// the most expensive ones. The WarmingUp kind therefore makes stored permits
// dearer than fresh ones. It starts with a full store (cold) and, while busy,
// works its way down through the dear permits to the cheap ones, so the rate
// climbs from rate/coldFactor to the stable rate over the warm-up period.
//
// The price of a permit is a function of how many permits are stored when it
// is taken: the throttling interval f(s). Taking k permits with s stored
// costs the area under f between s-k and s. For a warming-up engine f is flat
// at stableInterval up to a threshold and then rises in a straight line to
// coldInterval = coldFactor × stableInterval at maxPermits:
//
//	f(s): ticks per permit
//	  ^
//	  |                                         /|  <- coldInterval
//	  |                                       /  |     = coldFactor × stable
//	  |                                     /    |
//	  |                                   /      |
//	  |                                 /        |
//	  |                               /          |
//	  |                             /            |
//	  |   stableInterval        /                |
//	  +-------------------------+                |
//	  |                         |                |
//	  |  rectangle:             |  trapezoid:    |
//	  |  area = W / 2           |  area = W, the |
//	  |                         |  warm-up period|
//	  |                         |                |
//	  +-------------------------+----------------+----> s: stored permits
//	  0                     threshold        maxPermits
//
// Two choices fix the shape. The sloped part, a trapezoid from threshold
// to maxPermits, has an area of exactly W: a saturated limiter needs W to
// work through the dear permits, which is what "warm-up period" means.
// And the flat part holds half of that, W/2, at the stable price. So
//
//	threshold  = 0.5 × W / stableInterval
//	maxPermits = threshold + 2 × W / (stableInterval + coldInterval)
//	slope      = (coldInterval - stableInterval) / (maxPermits - threshold)
//
// (the trapezoid's width times its mean height (stable+cold)/2 is W). With
// the default coldFactor of 3, maxPermits is W / stableInterval, the
// threshold is half of it, and a cold limiter starts at a third of the
// stable rate. At 4 permits per second and W = 2 s: stable 0.25 s, cold
// 0.75 s, threshold 4, maxPermits 8, and the first permit taken from a full
// store costs the area between 7 and 8, (0.75 + 0.625) / 2 = 0.6875 s.
//
// Idle, a warming-up engine refills at coolDownInterval = W / maxPermits
// ticks per permit, so it goes from fully warm back to fully cold in W,
// whatever the cold factor. With coldFactor 3 that is the stable interval;
// with 10 it is about 1.47 stable intervals, with 1 two thirds of one.
//
// # Java arithmetic, emulated
//
// In the Guava mode the engine must agree with Guava bit for bit, and a few
// of Guava's own tests (the ones with infinite rates) pass through NaN on
// the way. So the pricing code follows Java's rules, not Go's, wherever
// they differ: a double-to-long cast truncates, maps NaN to 0 and saturates
// at the int64 bounds (Go leaves those cases to the platform; amd64 gives
// math.MinInt64); nextFreeTicket advances with a saturating add; minimums
// use math.Min semantics for NaN; products whose rounding matters are
// wrapped in float64(...) so that no platform fuses them into a
// multiply-add, which Java never does; and expressions keep Guava's
// left-to-right order, since (0.5 × W) / S and 0.5 × (W / S) can differ in
// the last bit.
//
// # Where the engine deliberately differs from Guava
//
// A warm-up period of 0 ticks (including a sub-microsecond one in the
// Guava mode) gives a warm engine at the stable rate that stores nothing.
// Guava computes coolDownInterval = 0/0 = NaN in that case, and after the
// first idle moment its store becomes NaN and every later price (long)NaN =
// 0: the limiter stops limiting for good.
//
// After a SetRate to a finite rate, a store that the rescale left NaN or
// +Inf (from products such as 0 × Inf or overflowing ones) is set to the
// conservative end instead: empty for a bursty engine, full (cold) for a
// warming-up one. Guava keeps the NaN, with the same unlimited result. At an
// infinite rate the engine keeps Guava's values bit for bit, so Guava's
// infinity tests still pass.
//
// Two repairs of the same kind only matter at absurd rates (fuzzing found
// them): after a SetRate to a finite rate the store is capped at maxPermits,
// since the rescale out of a subnormal capacity can overshoot it; and the
// price of stored and fresh permits is summed with saturation, where Guava's
// plain long sum can wrap to a negative wait.
//
// Cancel, which gives the latest reservation back exactly, is an addition
// of this package. It refuses when anything else has changed the engine
// since, because later reservations were priced on top of the one being
// cancelled and cannot be re-priced.
package smooth
