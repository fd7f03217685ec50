package clocktest

import (
	"context"
	"sync"
	"time"
)

// Manual is a clock whose time moves only when the test says so, and whose
// sleepers really block until then. It is the clock for concurrent tests: a
// goroutine that calls Sleep parks, the test waits for it with
// BlockUntilSleepers, then moves time with Advance or Set and the sleepers
// whose wake-up time has come return.
//
// Unlike Fake, Sleep does not move time, so a test sees exactly which
// goroutines are waiting for what, and a limiter's waits can be checked
// against the clock without any real sleeping.
//
// A Manual is safe for concurrent use. Its zero value is not usable: make
// one with NewManual.
type Manual struct {
	mu       sync.Mutex
	now      time.Time
	sleepers map[*sleeper]struct{}
	// registered is closed (and replaced) every time a sleeper arrives, so
	// that BlockUntilSleepers can wait for arrivals together with a
	// context, which a sync.Cond cannot do.
	registered chan struct{}
}

// sleeper is one goroutine parked in Manual.Sleep.
type sleeper struct {
	until time.Time
	wake  chan struct{} // closed by the clock when until is reached
}

// NewManual returns a Manual clock at Epoch with no sleepers.
func NewManual() *Manual {
	return &Manual{
		now:        Epoch,
		sleepers:   make(map[*sleeper]struct{}),
		registered: make(chan struct{}),
	}
}

// Now returns the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Elapsed returns how far the clock is from Epoch (negative if it was set
// before it).
func (m *Manual) Elapsed() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now.Sub(Epoch)
}

// Sleep blocks until the clock reaches Now()+d or ctx is done. It returns
// nil at once if d <= 0, and ctx's error if ctx ends first (or has already
// ended), in which case the sleeper is removed and no longer counts for
// BlockUntilSleepers. If time reaches the wake-up moment and ctx ends at the
// same time, the wake-up wins: the sleep did complete.
//
// The wake-up moment is absolute: if the clock is set back, the sleeper
// waits until the clock passes that moment again.
func (m *Manual) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	s := &sleeper{until: m.now.Add(d), wake: make(chan struct{})}
	m.sleepers[s] = struct{}{}
	close(m.registered)
	m.registered = make(chan struct{})
	m.mu.Unlock()

	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, asleep := m.sleepers[s]; !asleep {
			return nil // woken by the clock before we got the lock
		}
		delete(m.sleepers, s)
		return ctx.Err()
	}
}

// Advance moves the clock by d and wakes every sleeper whose time has come.
// A negative d sets the clock back and wakes no one.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(m.now.Add(d))
}

// Set moves the clock to t, forwards or backwards, and wakes every sleeper
// whose time has come.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(t)
}

// AdvanceToNext moves the clock to the earliest wake-up time among the
// sleepers, wakes those due, and returns how far it moved. With no
// sleepers, or if the earliest is not in the future, it moves nothing (but
// still wakes those due) and returns 0.
func (m *Manual) AdvanceToNext() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	next, ok := m.nextLocked()
	if !ok || !next.After(m.now) {
		m.setLocked(m.now)
		return 0
	}
	d := next.Sub(m.now)
	m.setLocked(next)
	return d
}

// Next returns the earliest wake-up time among the sleepers, and false if
// there are none.
func (m *Manual) Next() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nextLocked()
}

func (m *Manual) nextLocked() (time.Time, bool) {
	var next time.Time
	found := false
	for s := range m.sleepers {
		if !found || s.until.Before(next) {
			next, found = s.until, true
		}
	}
	return next, found
}

func (m *Manual) setLocked(t time.Time) {
	m.now = t
	for s := range m.sleepers {
		if !s.until.After(t) {
			delete(m.sleepers, s)
			close(s.wake)
		}
	}
}

// Sleepers returns how many goroutines are asleep on the clock now.
func (m *Manual) Sleepers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sleepers)
}

// BlockUntilSleepers waits until at least n goroutines are asleep on the
// clock at the same time, and returns nil; or returns ctx's error if ctx
// ends first. It does not poll: it wakes only when a sleeper arrives.
//
// When it returns nil the n sleepers are registered with their wake-up
// times, so an Advance made afterwards is guaranteed to reach them. A
// sleeper stops counting as soon as the clock wakes it or its context ends.
func (m *Manual) BlockUntilSleepers(ctx context.Context, n int) error {
	m.mu.Lock()
	for len(m.sleepers) < n {
		arrived := m.registered
		m.mu.Unlock()
		select {
		case <-arrived:
		case <-ctx.Done():
			return ctx.Err()
		}
		m.mu.Lock()
	}
	m.mu.Unlock()
	return nil
}
