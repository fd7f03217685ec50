package outage

import (
	"errors"
	"log"
	"strings"
	"testing"
	"time"
)

// TestOutageLog: in explicit time, every outage has its beginning (with
// the reason) and its end (with the duration and the requests by outcome);
// a long one is summarised every SummaryEvery, never more often, and
// nothing between is dropped from the counts.
func TestOutageLog(t *testing.T) {
	var out strings.Builder
	now := time.Unix(1_000_000, 0)
	o := New("store (redis x)", log.New(&out, "", 0))
	o.now = func() time.Time { return now }
	step := func(d time.Duration) { now = now.Add(d) }
	lines := func() []string {
		s := strings.TrimSuffix(out.String(), "\n")
		out.Reset()
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}

	o.OK() // no outage: nothing
	if l := lines(); l != nil {
		t.Fatalf("ok without an outage logged %q", l)
	}
	for round := range 2 {
		o.Fail(errors.New("connection refused"), "failed closed (503)")
		if l := lines(); len(l) != 1 || !strings.Contains(l[0], "outage began: connection refused; until it ends, each request is failed closed (503)") {
			t.Fatalf("round %d: begin %q", round, l)
		}
		for range 99 {
			step(50 * time.Millisecond) // 4.95 s: no summary yet
			o.Fail(errors.New("i/o timeout"), "failed closed (503)")
		}
		if l := lines(); l != nil {
			t.Fatalf("round %d: lines within the first %v: %q", round, SummaryEvery, l)
		}
		step(SummaryEvery)
		o.Fail(errors.New("i/o timeout"), "failed open")
		if l := lines(); len(l) != 1 || !strings.Contains(l[0], "outage goes on (15s so far): 100 requests failed closed (503), 1 request failed open; last error: i/o timeout") {
			t.Fatalf("round %d: summary %q", round, l)
		}
		step(time.Second)
		o.Fail(errors.New("i/o timeout"), "failed open")
		step(time.Second)
		o.OK()
		o.OK()
		if l := lines(); len(l) != 1 || !strings.Contains(l[0], "outage ended after 17s: 100 requests failed closed (503), 2 requests failed open") {
			t.Fatalf("round %d: end %q", round, l)
		}
	}
	o.Fail(errors.New("down"), "failed open")
	lines()
	step(3 * time.Second)
	o.Close()
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "still going at shutdown, after 3s: 1 request failed open; last error: down") {
		t.Fatalf("close: %q", l)
	}
}
