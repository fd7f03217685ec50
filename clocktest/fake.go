package clocktest

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/smoothrate/ratelimit/internal/sat"
)

// Epoch is where every Fake and Manual clock starts: 2000-01-01 00:00:00
// UTC, the same instant at which testing/synctest bubbles start.
var Epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Fake is Guava's FakeStopwatch in Go: a clock whose Sleep returns at once
// after moving time forward by the requested amount. Every sleep is recorded
// as an event "R<seconds>" (a sleep the Rate limiter asked for) and every
// Advance as "U<seconds>" (the User let time pass), with seconds printed like
// Java's "%3.2f" (two decimals, half-up), so that Guava's RateLimiterTest
// expectations can be compared string for string.
//
// A Fake is safe for concurrent use. Its time only moves when someone sleeps
// or advances it.
type Fake struct {
	mu      sync.Mutex
	instant time.Duration // since Epoch
	events  []string
}

// NewFake returns a Fake clock at Epoch with no events.
func NewFake() *Fake { return &Fake{} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Epoch.Add(f.instant)
}

// Elapsed returns how far the clock has moved from Epoch.
func (f *Fake) Elapsed() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.instant
}

// Sleep moves time forward by d (if positive) and records an "R" event, even
// for d <= 0, as Guava's FakeStopwatch does. If ctx is already done it
// returns ctx's error and neither moves time nor records anything.
func (f *Fake) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.move(max(d, 0), "R")
	return nil
}

// Advance moves time forward by d (if positive) and records a "U" event: the
// test's own passage of time, Guava's sleepMillis.
func (f *Fake) Advance(d time.Duration) {
	f.move(max(d, 0), "U")
}

// Jump moves time by d, forwards or backwards, and records nothing. Use it
// to test clocks that step, or Guava's silent "instant += …".
func (f *Fake) Jump(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.instant = addSaturated(f.instant, d)
}

func (f *Fake) move(d time.Duration, caption string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.instant = addSaturated(f.instant, d)
	f.events = append(f.events, caption+FormatSeconds(d))
}

// Events returns a copy of the events recorded since the last clear.
func (f *Fake) Events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

// TakeEvents returns the recorded events in the form Guava's assertEvents
// compares, "[R0.00, R0.20, U1.00]", and clears them.
func (f *Fake) TakeEvents() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := "[" + strings.Join(f.events, ", ") + "]"
	f.events = f.events[:0]
	return s
}

// ClearEvents forgets the recorded events.
func (f *Fake) ClearEvents() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = f.events[:0]
}

// FormatSeconds prints d in seconds with two decimals, rounding half up like
// Java's String.format("%3.2f") does for Guava's test events: 1.125 s is
// "1.13" and 0.625 s is "0.63" (Go's %.2f prints "1.12" and "0.62").
// Negative durations print as "-" and their magnitude.
func FormatSeconds(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign = "-"
		if d == math.MinInt64 {
			d++
		}
		d = -d
	}
	const unit = 10 * time.Millisecond // one hundredth of a second
	h := d / unit
	if d%unit >= unit/2 {
		h++
	}
	cents := int64(h % 100)
	s := strconv.FormatInt(int64(h/100), 10) + "."
	if cents < 10 {
		s += "0"
	}
	return sign + s + strconv.FormatInt(cents, 10)
}

func addSaturated(a, b time.Duration) time.Duration {
	return time.Duration(sat.Add(int64(a), int64(b)))
}
