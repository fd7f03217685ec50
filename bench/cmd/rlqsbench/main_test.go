package main

import (
	"strings"
	"testing"
	"time"
)

// TestWrite checks the table and the goal's verdicts: p99 under 50 ms with
// every report answered and as many reports as the Envoys send, measured only with 1 000 Envoys on at most 2
// processors.
func TestWrite(t *testing.T) {
	c := config{clients: 1000, buckets: 10, interval: time.Second, d: 10 * time.Second, warm: time.Second, serverProcs: 2}
	results := []result{
		{store: "memory", elapsed: 10 * time.Second, serverCPU: 2 * time.Second, reportsPerSecond: 10000,
			load: loadResult{reports: 100000, p50: time.Millisecond, p99: 20 * time.Millisecond, max: 30 * time.Millisecond}},
		{store: "redis", elapsed: 10 * time.Second, serverCPU: 3 * time.Second, redisCPU: time.Second, redisCmds: 5000, reportsPerSecond: 10000,
			load: loadResult{reports: 100000, p50: time.Millisecond, p99: 60 * time.Millisecond, max: 90 * time.Millisecond}},
	}
	var b strings.Builder
	write(&b, c, results)
	out := b.String()
	for _, want := range []string{
		"| memory | 10000 | 20.0 µs | 0.20 | – | – | 1ms | 20ms | 30ms | 0 |",
		"| redis | 10000 | 30.0 µs | 0.30 | 0.050 | 10.0 µs | 1ms | 60ms | 90ms | 0 |",
		"Goal (memory): a 2-core server keeps up with 1 000 Envoys, p99 under 50 ms: met",
		"Goal (redis): a 2-core server keeps up with 1 000 Envoys, p99 under 50 ms: NOT met",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	// Fewer reports than the Envoys send (streams refused): not met,
	// however quick the answers.
	short := results[:1]
	short[0].reportsPerSecond = 2560
	b.Reset()
	write(&b, c, short)
	if want := "p99 under 50 ms: NOT met (p99 20ms, 0 reports unanswered, 2560 of the 10000"; !strings.Contains(b.String(), want) {
		t.Errorf("missing %q in\n%s", want, b.String())
	}
	c.clients = 50
	b.Reset()
	write(&b, c, results)
	if !strings.Contains(b.String(), "not measured") {
		t.Errorf("50 Envoys judged:\n%s", b.String())
	}
}
