package shape_test

import (
	"testing"
	"time"
)

// BenchmarkTimerSleep measures what a short sleep really costs on this
// machine: ns/op is the real duration of time.Sleep(10µs), and the
// oversleep-ns metric what it took beyond the 10 µs asked. A shaped stream
// absorbs such an oversleep if its chunks last longer than it (the next
// chunk's wait shrinks by as much), or if the limiter stores at least that
// much time of permits (docs/shaping.md). Run:
//
//	go test -run XXX -bench TimerSleep -benchtime 500x -count 3 ./shape/
func BenchmarkTimerSleep(b *testing.B) {
	const asked = 10 * time.Microsecond
	start := time.Now()
	for b.Loop() {
		time.Sleep(asked)
	}
	per := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(per-asked), "oversleep-ns")
}
