package tsc

import (
	"testing"
	"testing/synctest"
	"time"
)

// setClock is a Source the test sets.
type setClock struct{ t time.Time }

func (c *setClock) Now() time.Time { return c.t }

// TestStopwatchSource: with a Source both readings are its time since the
// start; with an ordered reading of its own, ElapsedOrdered reads that one
// and the Stopwatch says its unordered reading may be early.
func TestStopwatchSource(t *testing.T) {
	c := &setClock{t: time.Unix(1000, 0)}
	sw := NewStopwatch(c, nil)
	if sw.Counter() || sw.ReadsEarly() || !sw.Start().Equal(c.t) {
		t.Fatalf("on a Source: counter %v, reads early %v, start %v", sw.Counter(), sw.ReadsEarly(), sw.Start())
	}
	c.t = c.t.Add(3 * time.Second)
	if u, o := sw.ElapsedUnordered(), sw.ElapsedOrdered(); u != 3*time.Second || o != 3*time.Second {
		t.Errorf("3 s later: unordered %v, ordered %v", u, o)
	}

	lag := 5 * time.Microsecond
	sw = NewStopwatch(c, func() time.Time { return c.t.Add(lag) })
	if !sw.ReadsEarly() {
		t.Fatal("a Source with an ordered reading: ReadsEarly false")
	}
	c.t = c.t.Add(time.Second)
	if u, o := sw.ElapsedUnordered(), sw.ElapsedOrdered(); u != time.Second || o != time.Second+lag {
		t.Errorf("unordered %v, ordered %v; want 1s and 1s+%v", u, o, lag)
	}
}

// TestStopwatchProcessClock: without a Source the Stopwatch reads the
// counter exactly where it is usable, both readings lie between
// time.Since's around them (what is measured is time itself), and inside a
// synctest bubble it follows the bubble's clock instead of the counter.
func TestStopwatchProcessClock(t *testing.T) {
	const tol = 20 * time.Microsecond
	sw := NewStopwatch(nil, nil)
	if sw.Counter() != Usable() || sw.ReadsEarly() != Usable() {
		t.Fatalf("counter %v, reads early %v; usable %v", sw.Counter(), sw.ReadsEarly(), Usable())
	}
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
		before := time.Since(sw.Start())
		u, o := sw.ElapsedUnordered(), sw.ElapsedOrdered()
		after := time.Since(sw.Start())
		if u < before-tol || u > after+tol || o < before-tol || o > after+tol {
			t.Fatalf("unordered %v, ordered %v; time.Since read %v before and %v after", u, o, before, after)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		sw := NewStopwatch(nil, nil)
		if sw.Counter() {
			t.Fatal("a Stopwatch started in a synctest bubble reads the counter")
		}
		time.Sleep(time.Hour)
		if u, o := sw.ElapsedUnordered(), sw.ElapsedOrdered(); u != time.Hour || o != time.Hour {
			t.Errorf("an hour of the bubble's time read as %v and %v", u, o)
		}
	})
}
