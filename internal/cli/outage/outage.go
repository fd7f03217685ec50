// Package outage is the outage log of the serving commands (proxy, rls):
// the failures of one thing a service depends on (its store, its backend),
// logged as an operator can act on them, one line when an outage begins,
// summaries while it lasts, one line when it ends.
package outage

import (
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/command"
)

// Log logs the failures of one thing a service depends on (the store, the
// backend) as an operator can act on them: one line when an outage begins,
// with its reason; while it lasts, a summary at most every SummaryEvery,
// with the requests it failed so far; one line when it
// ends, with its duration and the requests it failed, by what was done
// with them (failed open, failed closed). Every outage is logged, however
// many there are; no failure is dropped silently.
type Log struct {
	what string
	log  *log.Logger
	now  func() time.Time

	down atomic.Bool // read without the lock by OK, on every request

	mu        sync.Mutex
	began     time.Time
	lastLine  time.Time
	counts    []outcomeCount // in the order first seen
	sinceLine int64
	lastErr   string
}

type outcomeCount struct {
	outcome string
	n       int64
}

// SummaryEvery is the least time between two lines about one outage.
const SummaryEvery = 10 * time.Second

// New returns the log of what's outages (e.g. "store (redis host:6379)"),
// written on l.
func New(what string, l *log.Logger) *Log {
	return &Log{what: what, log: l, now: time.Now}
}

// Fail records a request that failed with err and what was done with it.
func (o *Log) Fail(err error, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	reason := err.Error()
	if !o.down.Load() {
		o.began, o.lastLine, o.counts, o.sinceLine = now, now, o.counts[:0], 0
		o.down.Store(true)
		o.log.Printf("%s outage began: %s; until it ends, each request is %s", o.what, reason, outcome)
	}
	o.count(outcome)
	o.sinceLine++
	o.lastErr = reason
	if now.Sub(o.lastLine) >= SummaryEvery {
		o.log.Printf("%s outage goes on (%v so far): %s; last error: %s", o.what, round(now.Sub(o.began)), o.summary(), reason)
		o.lastLine, o.sinceLine = now, 0
	}
}

func (o *Log) count(outcome string) {
	for i := range o.counts {
		if o.counts[i].outcome == outcome {
			o.counts[i].n++
			return
		}
	}
	o.counts = append(o.counts, outcomeCount{outcome, 1})
}

func (o *Log) summary() string {
	parts := make([]string, len(o.counts))
	for i, c := range o.counts {
		parts[i] = fmt.Sprintf("%d %s %s", c.n, command.Plural(c.n, "request", "requests"), c.outcome)
	}
	return strings.Join(parts, ", ")
}

// OK records a request that succeeded; the first after an outage ends it.
func (o *Log) OK() {
	if !o.down.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down.Load() {
		return
	}
	o.down.Store(false)
	o.log.Printf("%s outage ended after %v: %s", o.what, round(o.now().Sub(o.began)), o.summary())
}

// Close logs an outage still going on when the service stops.
func (o *Log) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down.Load() {
		o.log.Printf("%s outage still going at shutdown, after %v: %s; last error: %s", o.what, round(o.now().Sub(o.began)), o.summary(), o.lastErr)
	}
}

func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}
