// Package ctxtest has contexts for tests that must end a call part way
// through at a known point, without timers: a store that looks at its
// context every so many steps is shown to stop at the first look after the
// context ends.
package ctxtest

import (
	"context"
	"sync/atomic"
)

// Countdown is a context that is done from its at-th look at Err on (Done
// never closes: the code under test must look at Err). Safe for
// concurrent use.
type Countdown struct {
	context.Context
	looks, at atomic.Int64
}

// NewCountdown returns a context whose Err is context.Canceled from its
// at-th call on.
func NewCountdown(at int64) *Countdown {
	c := &Countdown{Context: context.Background()}
	c.at.Store(at)
	return c
}

// Err returns context.Canceled once it has been called at times.
func (c *Countdown) Err() error {
	if c.looks.Add(1) >= c.at.Load() {
		return context.Canceled
	}
	return nil
}

// Looks is how many times Err was called.
func (c *Countdown) Looks() int64 { return c.looks.Load() }
