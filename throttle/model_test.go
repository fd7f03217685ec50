package throttle

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// model is one key decided by the pure functions of algorithms.go alone:
// the definition, with nothing of a store around it. Property tests and
// fuzz targets clone it to ask "what if" questions (RetryAfter exactness)
// that a store cannot answer without changing.
type model struct {
	p   *params
	st  state
	ok  bool
	log ring
}

func newModel(alg Algorithm, l Limit) (*model, error) {
	p, err := newParams(alg, l)
	if err != nil {
		return nil, err
	}
	return &model{p: &p}, nil
}

// decide decides n at now (µs) and writes what an allowed request writes.
func (m *model) decide(now, n int64) Decision {
	if m.p.alg == SlidingLog {
		d, expired, at, write := decideSlidingLog(m.p, &m.log, now, n)
		if write {
			m.log.drop(expired)
			m.log.push(at, int(n))
		}
		return d
	}
	d, next, write := decideState(m.p, m.st, m.ok, now, n)
	if write {
		m.st, m.ok = next, true
	}
	return d
}

func (m *model) clone() *model {
	c := *m
	c.log = *m.log.clone()
	return &c
}

// op is one step of a trace: at time at (µs since the epoch), ask for n.
type op struct {
	at, n int64
}

// admitted is a request that was allowed, for the bound checks.
type admitted struct {
	at, n int64
}

// randomLimit returns a small limit for alg with an awkward period (rarely
// a multiple of Count, so emission intervals are fractions of a µs).
func randomLimit(r *rand.Rand, alg Algorithm) Limit {
	l := Limit{Count: 1 + r.IntN(8), Period: time.Duration(1+r.IntN(20_000)) * time.Microsecond}
	if r.IntN(3) == 0 {
		l.Period = time.Duration(1+r.IntN(5)) * time.Second / time.Duration(1+r.IntN(7))
		l.Period -= l.Period % time.Microsecond
	}
	switch alg {
	case GCRA, TokenBucket, LeakyBucket:
		l.Burst = l.Count * (1 + r.IntN(3)) / (1 + r.IntN(2))
		l.Burst = max(1, l.Burst)
	}
	return l
}

// randomTrace returns m ops starting at start: mostly steps of up to two
// emission intervals, sometimes several periods; n mostly 1, sometimes 0
// and sometimes beyond the limit; with back, the clock sometimes steps
// back.
func randomTrace(r *rand.Rand, l Limit, m int, start int64, back bool) []op {
	period := int64(l.Period / time.Microsecond)
	step := max(1, 2*period/int64(l.Count))
	limit := int64(max(l.Count, l.Burst))
	ops := make([]op, m)
	t := start
	for i := range ops {
		switch x := r.IntN(20); {
		case x == 0:
			t += r.Int64N(3 * period)
		case x == 1 && back:
			t = max(start, t-r.Int64N(period))
		case x < 5:
			// same instant
		default:
			t += r.Int64N(step + 1)
		}
		n := int64(1)
		switch x := r.IntN(10); {
		case x == 0:
			n = 0
		case x == 1:
			n = r.Int64N(limit + 3)
		}
		ops[i] = op{at: t, n: n}
	}
	return ops
}

// checkBound returns an error if the admitted requests exceed alg's
// admission bound under l. Times must be non-decreasing (use the running
// maximum of a clock that stepped back).
func checkBound(alg Algorithm, l Limit, adm []admitted) error {
	p, err := newParams(alg, l)
	if err != nil {
		return err
	}
	switch alg {
	case GCRA, TokenBucket, LeakyBucket:
		// ≤ Burst + Count·t/Period in every interval [t_i, t_j].
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].n
				if sum*p.period > p.burst*p.period+p.count*(adm[j].at-adm[i].at) {
					return fmt.Errorf("%d admitted in [%d, %d] µs, more than %d + %d·%d/%d", sum, adm[i].at, adm[j].at, p.burst, p.count, adm[j].at-adm[i].at, p.period)
				}
			}
		}
		return nil
	}
	perWindow := map[int64]int64{}
	for _, a := range adm {
		perWindow[a.at/p.period] += a.n
	}
	if alg != SlidingLog {
		for w, sum := range perWindow {
			if sum > p.count {
				return fmt.Errorf("%d admitted in aligned window %d, more than %d", sum, w, p.count)
			}
		}
	}
	// Any interval (t − period, t]: ≤ count for the log, ≤ 2·count for
	// the sliding window, ≤ 2·count for the fixed window.
	most := 2 * p.count
	if alg == SlidingLog {
		most = p.count
	}
	lo := 0
	var sum int64
	for j := range adm {
		sum += adm[j].n
		for adm[lo].at <= adm[j].at-p.period {
			sum -= adm[lo].n
			lo++
		}
		if sum > most {
			return fmt.Errorf("%d admitted in (%d − period, %d], more than %d", sum, adm[j].at, adm[j].at, most)
		}
	}
	return nil
}
