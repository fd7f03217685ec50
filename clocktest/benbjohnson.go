package clocktest

import (
	"context"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/smoothrate/ratelimit/internal/sleep"
)

// Benbjohnson adapts a github.com/benbjohnson/clock Clock (its real clock,
// clock.New(), or its *clock.Mock) to the limiter's Clock, for code bases
// that already drive their time with that library.
//
// The Mock has a sleep/advance race of its own: Mock.Sleep registers its
// timer only when the sleeping goroutine gets to run, and Mock.Add fires the
// timers registered at that moment and then merely sleeps 1 ms of real time
// "to let other goroutines run". A goroutine that has not yet registered its
// timer when Add runs never wakes, and the Mock offers no way to know
// whether it has. The adapter closes that gap: Sleep registers its Mock
// timer first and only then counts itself as a sleeper, and
// BlockUntilSleepers lets the advancing side wait, without polling, until n
// sleepers' timers are registered. An Add made after BlockUntilSleepers
// returns is then guaranteed to reach them.
//
// Use it as:
//
//	mock := clock.NewMock()
//	c := clocktest.NewBenbjohnson(mock)
//	go worker(c)                     // sleeps through c.Sleep
//	c.BlockUntilSleepers(ctx, 1)     // its timer is now in the Mock
//	mock.Add(time.Second)            // and this wakes it
//
// The Mock still sleeps 1 ms of real time in every Add and for every timer
// it fires; prefer Manual or testing/synctest for new tests.
type Benbjohnson struct {
	clock clock.Clock

	mu sync.Mutex
	// wakeAt holds the wake-up time of every goroutine asleep in Sleep,
	// keyed by its timer, which was registered in the adapted clock before
	// it was added here.
	wakeAt map[*clock.Timer]time.Time
	// registered is closed (and replaced) whenever a sleeper registers, to
	// wake BlockUntilSleepers.
	registered chan struct{}
}

// NewBenbjohnson returns an adapter over c: clock.New() for real time or a
// *clock.Mock for tests. A nil c means clock.New().
func NewBenbjohnson(c clock.Clock) *Benbjohnson {
	if c == nil {
		c = clock.New()
	}
	return &Benbjohnson{
		clock:      c,
		wakeAt:     make(map[*clock.Timer]time.Time),
		registered: make(chan struct{}),
	}
}

// Clock returns the adapted clock.
func (b *Benbjohnson) Clock() clock.Clock { return b.clock }

// Now returns the adapted clock's time.
func (b *Benbjohnson) Now() time.Time { return b.clock.Now() }

// Sleep blocks until the adapted clock has moved by d, or until ctx is done,
// in which case it stops its timer and returns ctx's error. A d <= 0
// returns nil at once.
func (b *Benbjohnson) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The timer is in the Mock's list once Timer returns: from here on an
	// Add that covers d fires it (into a buffered channel, so the send
	// never waits for us). Only now do we announce ourselves. The Mock sets
	// the timer to its current time + d; reading the time just before is
	// exact unless someone moves the clock while sleepers register, which
	// is the racy use this adapter exists to avoid (and even then the
	// error is on the side of waiting longer in BlockUntilSleepers).
	wake := b.clock.Now().Add(d)
	t := b.clock.Timer(d)
	b.mu.Lock()
	b.wakeAt[t] = wake
	close(b.registered)
	b.registered = make(chan struct{})
	b.mu.Unlock()

	defer func() {
		b.mu.Lock()
		delete(b.wakeAt, t)
		b.mu.Unlock()
	}()
	err := sleep.Await(ctx, t.C, func() bool { return !b.clock.Now().Before(wake) })
	if err != nil {
		t.Stop()
	}
	return err
}

// Sleepers returns how many goroutines are asleep in Sleep with a wake-up
// time the clock has not reached yet.
func (b *Benbjohnson) Sleepers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pendingLocked()
}

// pendingLocked counts the sleepers whose wake-up time the clock has not
// reached. The Mock moves its time to a timer's wake-up time before firing
// it, so a timer counted here has not fired, and one that has fired is not
// counted even if its goroutine has not yet run to leave Sleep. (Counting
// goroutines instead would count a just-woken sleeper as still asleep, and
// let the next Add run before the next Sleep registers.) A timer whose time
// has been reached but which the Mock is about to fire is not counted
// either: the count errs only on the side of waiting for more.
func (b *Benbjohnson) pendingLocked() int {
	now := b.clock.Now()
	n := 0
	for _, wake := range b.wakeAt {
		if wake.After(now) {
			n++
		}
	}
	return n
}

// BlockUntilSleepers waits until at least n goroutines are asleep in Sleep
// with their timers registered in the adapted clock and their wake-up time
// not yet reached, and returns nil; or returns ctx's error if ctx ends
// first. An Add made after it returns is guaranteed to reach those timers.
//
// It does not poll: it re-counts only when a sleeper registers. Between
// registrations the count can only fall (timers fire, contexts end) unless
// the clock is set back, so waiting for the next registration loses nothing
// in the intended use, where the goroutine that calls BlockUntilSleepers is
// the one that moves the clock.
func (b *Benbjohnson) BlockUntilSleepers(ctx context.Context, n int) error {
	b.mu.Lock()
	for b.pendingLocked() < n {
		arrived := b.registered
		b.mu.Unlock()
		select {
		case <-arrived:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
	}
	b.mu.Unlock()
	return nil
}
