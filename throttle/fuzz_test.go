package throttle

import (
	"strings"
	"testing"
	"time"
)

// FuzzAlgorithms decides a fuzzed trace for a fuzzed limit with the pure
// definition and asserts every property the property tests assert: the
// admission bound (times taken as the latest admitted, so a clock stepping
// back may not create allowance), RetryAfter exactness while the clock has
// not stepped back, Remaining within [0, Limit], and, for the meters,
// that GCRA, the token bucket and the leaky bucket decide alike on the
// monotone prefix of the trace. A MemoryStore decides the same trace and
// must answer as the definition does (its GCRA has a fused path of its
// own), for a short key and for one it holds by its digest (longer than
// maxHeldKey, decided through AllowAll's path).
//
// The trace is pairs of bytes (dt, n): dt 255 jumps three periods ahead,
// 254 steps back up to one period, anything else moves dt/64 of an
// emission interval; n is taken modulo Limit+3 (n > Limit can never fit).
func FuzzAlgorithms(f *testing.F) {
	long := strings.Repeat("k", maxHeldKey+1)
	f.Add(uint8(GCRA), uint16(5), uint32(1_000_000), uint16(5), []byte{0, 1, 0, 1, 0, 1, 64, 1, 255, 6, 254, 2})
	f.Add(uint8(FixedWindow), uint16(3), uint32(1_000_000), uint16(0), []byte{200, 3, 10, 3, 0, 1, 254, 1})
	f.Add(uint8(SlidingWindow), uint16(50), uint32(60_000_000), uint16(0), []byte{0, 42, 100, 18, 0, 1, 30, 1})
	f.Add(uint8(SlidingLog), uint16(3), uint32(7001), uint16(0), []byte{0, 1, 20, 2, 200, 1, 254, 3, 0, 0})
	f.Add(uint8(TokenBucket), uint16(7), uint32(999_999), uint16(20), []byte{0, 20, 3, 1, 250, 5})
	f.Add(uint8(LeakyBucket), uint16(1), uint32(3), uint16(2), []byte{0, 2, 1, 1, 2, 1, 255, 0})
	f.Fuzz(func(t *testing.T, a uint8, count uint16, periodUs uint32, burst uint16, trace []byte) {
		alg := Algorithm(a%6 + 1)
		l := Limit{Count: int(count%512) + 1, Period: time.Duration(periodUs%(1<<30)+1) * time.Microsecond}
		switch alg {
		case GCRA, TokenBucket, LeakyBucket:
			l.Burst = int(burst % 1024)
		}
		if len(trace) > 400 {
			trace = trace[:400]
		}
		m, err := newModel(alg, l)
		if err != nil {
			t.Fatalf("%v %v: %v", alg, l, err)
		}
		ops := fuzzTrace(m.p, trace)
		clk := newSetClock()
		lim := mustNew(t, memStore(WithStoreClock(clk)), alg, l)
		var adm []admitted
		var latest, seen int64
		monotone := true
		for i, o := range ops {
			if o.at < seen {
				monotone = false
			}
			seen = max(seen, o.at)
			before := m.clone()
			d := m.decide(o.at, o.n)
			clk.Set(time.UnixMicro(o.at))
			if got := mustAllow(t, lim, "k", int(o.n)); got != d {
				t.Fatalf("%v %v op %d (n=%d at %d): MemoryStore %+v, definition %+v", alg, l, i, o.n, o.at, got, d)
			}
			if got := mustAllow(t, lim, long, int(o.n)); got != d {
				t.Fatalf("%v %v op %d (n=%d at %d): MemoryStore, a long key: %+v, definition %+v", alg, l, i, o.n, o.at, got, d)
			}
			if d.Remaining < 0 || d.Remaining > d.Limit || d.Limit != int(m.p.limit) || d.ResetAfter < 0 {
				t.Fatalf("op %d: %+v out of range for %v %v", i, d, alg, l)
			}
			if d.Allowed && o.n > 0 {
				latest = max(latest, o.at)
				adm = append(adm, admitted{at: latest, n: o.n})
			}
			if monotone {
				if err := checkRetryAfter(before, d, o); err != nil {
					t.Fatalf("%v %v op %d: %v", alg, l, i, err)
				}
			}
		}
		if err := checkBound(alg, l, adm); err != nil {
			t.Fatalf("%v %v: %v", alg, l, err)
		}
		if alg == GCRA || alg == TokenBucket || alg == LeakyBucket {
			end := 0
			for end < len(ops) && (end == 0 || ops[end].at >= ops[end-1].at) {
				end++
			}
			if err := checkMetersAgree(l, ops[:end]); err != nil {
				t.Fatalf("%v: %v", l, err)
			}
		}
	})
}

// fuzzTrace decodes FuzzAlgorithms' trace bytes.
func fuzzTrace(p *params, trace []byte) []op {
	step := max(1, p.period/p.count)
	at := clocktestEpochMicros
	var ops []op
	for i := 0; i+1 < len(trace); i += 2 {
		switch dt := int64(trace[i]); dt {
		case 255:
			at += 3 * p.period
		case 254:
			at -= min(p.period, at-clocktestEpochMicros)
		default:
			at += dt * step / 64
		}
		ops = append(ops, op{at: at, n: int64(trace[i+1]) % (p.limit + 3)})
	}
	return ops
}
