package throttle

import (
	"fmt"
	"time"
)

// Limit is a keyed limit: Count requests per Period for every key, of which
// at most Burst at once. Burst 0 means Count.
//
// For GCRA and the two buckets, Burst is the bucket's size and
// Count/Period its refill rate. The windows and the sliding log count
// requests per Period and have no separate burst: their Burst must be 0 or
// Count.
//
// redis-cell's `CL.THROTTLE key max_burst count period` is
// Limit{Count: count, Period: period seconds, Burst: max_burst + 1};
// go-redis/redis_rate's Limit{Rate, Burst, Period} is
// Limit{Count: Rate, Period: Period, Burst: Burst}.
type Limit struct {
	Count  int
	Period time.Duration
	Burst  int
}

// PerSecond returns a limit of n requests per second with a burst of n.
func PerSecond(n int) Limit { return Limit{Count: n, Period: time.Second} }

// PerMinute returns a limit of n requests per minute with a burst of n.
func PerMinute(n int) Limit { return Limit{Count: n, Period: time.Minute} }

// PerHour returns a limit of n requests per hour with a burst of n.
func PerHour(n int) Limit { return Limit{Count: n, Period: time.Hour} }

// Validate reports whether l is a limit New accepts for alg, without a
// store: nil, or the error New would return (wrapping ErrInvalidLimit or
// ErrInvalidAlgorithm). A configuration can be checked with it before any
// store exists.
func (l Limit) Validate(alg Algorithm) error {
	_, err := newParams(alg, l)
	return err
}

// String formats the limit as "100/1m0s (burst 10)".
func (l Limit) String() string {
	b := l.Burst
	if b == 0 {
		b = l.Count
	}
	return fmt.Sprintf("%d/%v (burst %d)", l.Count, l.Period, b)
}

// Algorithm names one of the keyed algorithms. Each is defined exactly in
// the doc comment of its constant; the memory and Redis stores implement
// the same definitions with the same integer arithmetic, so they decide
// identically.
type Algorithm uint8

const (
	// GCRA is the generic cell rate algorithm of redis-cell's
	// CL.THROTTLE: a bucket of Burst requests refilled at Count per
	// Period, kept as one number, the theoretical arrival time TAT (when
	// the key would be full again). With emission interval T = Period/Count
	// and τ = Burst·T, a request of n at now is allowed when
	// max(TAT, now) + n·T − now ≤ τ, and then TAT becomes max(TAT, now) +
	// n·T. Never more than Burst + Count·t/Period admitted in any interval
	// of length t. Remaining = ⌊(τ − debt)/T⌋, ResetAfter = the debt
	// (TAT − now), RetryAfter = the time until the debt has fallen enough,
	// all exact to the microsecond (T is kept as an exact fraction of a
	// microsecond, not rounded). O(1) memory per key.
	GCRA Algorithm = iota + 1
	// TokenBucket holds up to Burst tokens, refilled continuously at Count
	// per Period (never once per interval); a request of n takes n tokens
	// or is refused and takes nothing. It keeps two numbers (tokens, last
	// refill) and, on a clock that only moves forward, decides exactly as
	// GCRA, with the same Decisions; when the clock steps back it refills
	// nothing until time passes the last refill again. O(1) memory.
	TokenBucket
	// LeakyBucket is the articles' funnel: a bucket of size Burst leaking
	// continuously at Count per Period; a request of n pours n units and
	// is refused, pouring nothing, when the level would exceed Burst (a
	// level of 1.5 in a bucket of 2 refuses 1 more). It is the token
	// bucket seen from the other side (level = Burst − tokens) and decides
	// as GCRA on a forward-moving clock. O(1) memory.
	LeakyBucket
	// FixedWindow counts requests in windows of length Period that start
	// at multiples of Period since the Unix epoch, so every process and
	// both stores agree on them: at most Count per window, a request of n
	// refused (counting nothing) when count + n > Count, RetryAfter the
	// time to the window's end. Up to 2·Count pass within a moment around
	// a window edge (Count at the end of one window, Count at the start of
	// the next: docs/throttle.svg). O(1) memory.
	FixedWindow
	// SlidingWindow is Cloudflare's approximation of a sliding window from
	// two aligned fixed windows: at elapsed time e into the current window
	// it estimates prev·(Period − e)/Period + curr, and allows n when the
	// estimate + n ≤ Count. It never admits more than Count per aligned
	// window (curr alone must fit), so at most 2·Count in any interval of
	// length Period, and in steady traffic close to Count (Cloudflare
	// measured 0.003 % of 400 million requests wrongly decided). The
	// estimate is a float64 computed by the same operations in both
	// stores. O(1) memory.
	SlidingWindow
	// SlidingLog logs the time of every admitted request (n entries for a
	// request of n) and counts the entries younger than Period: exact,
	// never more than Count in any interval of length Period, RetryAfter
	// the time until enough entries expire. Refused requests are not
	// logged, and requests in the same microsecond are distinct entries.
	// O(Count) memory per key, so Count is at most MaxLogCount: for
	// large counts prefer SlidingWindow.
	SlidingLog
)

var algorithmNames = [...]string{
	GCRA:          "gcra",
	TokenBucket:   "token-bucket",
	LeakyBucket:   "leaky-bucket",
	FixedWindow:   "fixed-window",
	SlidingWindow: "sliding-window",
	SlidingLog:    "sliding-log",
}

// String returns the algorithm's name as ParseAlgorithm reads it
// ("gcra", "token-bucket", …).
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

func (a Algorithm) valid() bool { return a >= GCRA && a <= SlidingLog }

// ParseAlgorithm reads an algorithm's name as String prints it.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := GCRA; a <= SlidingLog; a++ {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want gcra, token-bucket, leaky-bucket, fixed-window, sliding-window or sliding-log)", ErrInvalidAlgorithm, s)
}

// MaxLogCount is the largest Count a SlidingLog limit may have: the log
// keeps one 8-byte timestamp per admitted request younger than the period,
// so a key may hold Count of them (8 MiB at this bound), and one AllowN
// may log Count at once.
const MaxLogCount = 1 << 20

// maxExact is the largest integer below which every float64 integer is
// exact (2^53). All state and arithmetic stay below it, so the Redis
// scripts (Lua numbers are doubles) compute exactly what Go computes.
const maxExact = 1 << 53

// params is a validated Limit in the integer units both stores compute in.
//
// Time is in whole microseconds since the Unix epoch. The meters (GCRA and
// the buckets) need the emission interval Period/Count, which is rarely a
// whole number of microseconds, so they measure time in units of 1/den µs,
// where den = Count/gcd(Period, Count): one request then costs exactly
// emission = Period/gcd(Period, Count) units and the bucket holds
// tau = Burst × emission units. A microsecond is den units.
type params struct {
	alg      Algorithm
	count    int64 // C: requests per period
	burst    int64 // B: bucket size (meters); == count for windows and the log
	period   int64 // P: µs
	emission int64 // P/g: cost of one request, in units
	den      int64 // C/g: units per µs
	tau      int64 // B × emission: bucket size in units
	limit    int64 // Decision.Limit: burst for meters, count for windows and the log
	debtCap  int64 // quo(maxDebt, den): the most whole µs of debt a meter counts (meters only)
	wide     bool  // a MemoryStore keeps this algorithm's state partly in ext (packState)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// newParams validates l for alg.
func newParams(alg Algorithm, l Limit) (params, error) {
	if !alg.valid() {
		return params{}, fmt.Errorf("%w: %v", ErrInvalidAlgorithm, alg)
	}
	if l.Count < 1 {
		return params{}, fmt.Errorf("%w: count %d must be at least 1", ErrInvalidLimit, l.Count)
	}
	if l.Period < time.Microsecond || l.Period%time.Microsecond != 0 {
		return params{}, fmt.Errorf("%w: period %v must be a positive whole number of microseconds", ErrInvalidLimit, l.Period)
	}
	if l.Burst < 0 {
		return params{}, fmt.Errorf("%w: burst %d must not be negative", ErrInvalidLimit, l.Burst)
	}
	p := params{alg: alg, count: int64(l.Count), burst: int64(l.Burst), period: int64(l.Period / time.Microsecond)}
	p.wide = alg == TokenBucket || alg == LeakyBucket || alg == SlidingLog
	if p.burst == 0 {
		p.burst = p.count
	}
	if p.count >= maxExact || p.period >= maxMicros {
		return params{}, fmt.Errorf("%w: %v is too large (count must stay below 2^53 and the period below 2^52 µs)", ErrInvalidLimit, l)
	}
	switch alg {
	case FixedWindow, SlidingWindow, SlidingLog:
		if p.burst != p.count {
			return params{}, fmt.Errorf("%w: %v has no separate burst (Burst must be 0 or Count, %d)", ErrInvalidLimit, alg, l.Count)
		}
		if alg == SlidingLog && p.count > MaxLogCount {
			return params{}, fmt.Errorf("%w: %v keeps one entry per admitted request: Count %d is above MaxLogCount (%d); use SlidingWindow", ErrInvalidLimit, alg, l.Count, MaxLogCount)
		}
		p.limit = p.count
	default:
		g := gcd(p.period, p.count)
		p.emission, p.den = p.period/g, p.count/g
		// A request of n ≤ burst costs at most tau, and debt never
		// exceeds tau plus one such request: 2·tau must stay exact. And
		// tau must stay within the debt a meter counts (maxDebt, the cap
		// for a clock that stepped back), or a full bucket would count as
		// less than full and admit more than the burst at once.
		if p.burst > maxDebt/p.emission {
			return params{}, fmt.Errorf("%w: %v is too large for exact arithmetic (burst × period/gcd(period µs, count) must stay below 2^51)", ErrInvalidLimit, l)
		}
		p.tau = p.burst * p.emission
		p.limit = p.burst
		p.debtCap = quo(maxDebt, p.den)
	}
	return p, nil
}
