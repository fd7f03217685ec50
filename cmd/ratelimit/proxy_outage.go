package main

import (
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/command"
)

// outageLog logs the failures of one thing the proxy depends on (the
// store, the backend) as an operator can act on them: one line when an
// outage begins, with its reason; while it lasts, a summary at most every
// outageSummaryEvery, with the requests it failed so far; one line when it
// ends, with its duration and the requests it failed, by what was done
// with them (failed open, failed closed). Every outage is logged, however
// many there are; no failure is dropped silently.
type outageLog struct {
	what string
	log  *log.Logger
	now  func() time.Time

	down atomic.Bool // read without the lock by ok, on every request

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

// outageSummaryEvery is the least time between two lines about one
// outage.
const outageSummaryEvery = 10 * time.Second

func newOutageLog(what string, l *log.Logger) *outageLog {
	return &outageLog{what: what, log: l, now: time.Now}
}

// fail records a request that failed with err and what was done with it.
func (o *outageLog) fail(err error, outcome string) {
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
	if now.Sub(o.lastLine) >= outageSummaryEvery {
		o.log.Printf("%s outage goes on (%v so far): %s; last error: %s", o.what, round(now.Sub(o.began)), o.summary(), reason)
		o.lastLine, o.sinceLine = now, 0
	}
}

func (o *outageLog) count(outcome string) {
	for i := range o.counts {
		if o.counts[i].outcome == outcome {
			o.counts[i].n++
			return
		}
	}
	o.counts = append(o.counts, outcomeCount{outcome, 1})
}

func (o *outageLog) summary() string {
	parts := make([]string, len(o.counts))
	for i, c := range o.counts {
		parts[i] = fmt.Sprintf("%d %s %s", c.n, command.Plural(c.n, "request", "requests"), c.outcome)
	}
	return strings.Join(parts, ", ")
}

// ok records a request that succeeded; the first after an outage ends it.
func (o *outageLog) ok() {
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

// close logs an outage still going on when the proxy stops.
func (o *outageLog) close() {
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
