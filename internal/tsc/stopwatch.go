package tsc

import "time"

// Source is a clock a Stopwatch reads instead of the process's own: a
// limiter's injected clock (the root package's Clock is one).
type Source interface {
	Now() time.Time
}

// A Stopwatch measures the time since it was started, for a limiter that
// reads the clock on every grant: the root Limiter and the distributed
// Limiter each hold one. Without a Source it reads the process's monotonic
// clock, from the counter where it may (Usable, and time not fake: a
// testing/synctest bubble's clock is read from the time package, which
// follows the bubble).
//
// It has two readings, named by the order they keep:
//
//   - ElapsedUnordered, for the hot path's one reading: the counter read
//     without a fence (Now), which the processor may take up to
//     ReorderSlack before the memory references that precede it. A grant
//     may rest on it (the call is served as at a moment that did pass);
//     a refusal may not, unless it is clear by more than ReorderSlack.
//   - ElapsedOrdered: read after every instruction before it has
//     completed (NowOrdered), for the readings a refusal, a lapse or a
//     call to a server rests on.
//
// With a Source both are its Now, except for a test's clock that models a
// stale reading: NewStopwatch's ordered is then the ordered reading, and
// the Source's Now the unordered one.
//
// A Stopwatch is set once by NewStopwatch and only read after: safe for
// concurrent use.
type Stopwatch struct {
	src      Source           // nil: the process's clock
	ordered  func() time.Time // the Source's ordered reading; nil: its Now is ordered
	start    time.Time        // the origin, on src or the time package
	startTSC int64            // the origin on the counter's clock (Since)
	counter  bool             // src is nil, the counter usable, time not fake
}

// NewStopwatch starts a Stopwatch on src (nil: the process's clock, read
// from the counter where it may). ordered, when not nil, is src's reading
// that is never earlier than the memory references before it, and src.Now
// one that may be (tests model the counter's unfenced reading with it).
func NewStopwatch(src Source, ordered func() time.Time) Stopwatch {
	if src == nil {
		start := time.Now()
		return Stopwatch{start: start, startTSC: Since(start), counter: Usable() && !FakeTime()}
	}
	return Stopwatch{src: src, ordered: ordered, start: src.Now()}
}

// Start is the Stopwatch's origin, on its Source (or the time package).
func (s *Stopwatch) Start() time.Time { return s.start }

// Counter reports whether the Stopwatch reads the processor's counter.
func (s *Stopwatch) Counter() bool { return s.counter }

// ReadsEarly reports whether ElapsedUnordered may read a time from before
// the memory references that precede it: the counter is read, or the
// Source has an ordered reading of its own.
func (s *Stopwatch) ReadsEarly() bool { return s.counter || s.ordered != nil }

// ElapsedUnordered is the time since the start, read without a fence where
// the counter is read: see Stopwatch.
func (s *Stopwatch) ElapsedUnordered() time.Duration {
	if s.counter {
		return time.Duration(nowSince(s.startTSC))
	}
	if s.src == nil {
		return time.Since(s.start)
	}
	return s.src.Now().Sub(s.start)
}

// ElapsedOrdered is the time since the start, read after every instruction
// before it has completed: see Stopwatch.
func (s *Stopwatch) ElapsedOrdered() time.Duration {
	if s.counter {
		return time.Duration(NowOrdered() - s.startTSC)
	}
	if s.src == nil {
		return time.Since(s.start)
	}
	if s.ordered != nil {
		return s.ordered().Sub(s.start)
	}
	return s.src.Now().Sub(s.start)
}
