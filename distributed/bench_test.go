package distributed

import (
	"context"
	"testing"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// BenchmarkTryAcquireLocal measures TryAcquire(1, 0) with permits in hand,
// next to the local limiter's TryAcquire in the same run:
//
//	go test -run '^$' -bench TryAcquireLocal -benchmem -count 5 ./distributed/
//
// "Permits in hand" is this configuration: one process alone on a real
// redis-server, a fleet rate of 1e9/s (so every lease covers the demand and
// the shared bucket is never empty), measured at steady state, after the
// demand estimate exists and prefetching has taken over. Every call must
// succeed, and the remote/op metric counts the calls that waited for a
// Redis reply: with prefetch keeping ahead of the pool it is 0. The
// background lease calls do run during the measurement, on the other core.
func BenchmarkTryAcquireLocal(b *testing.B) {
	b.Run("distributed", func(b *testing.B) {
		srv := redistest.Start(b)
		l, err := New(newClient(b, srv), "bench", 1e9, WithProcessID("bench"))
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close(context.Background())
		warm(b, l)
		before := l.Stats()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if !l.TryAcquire(1, 0) {
				b.Fatalf("TryAcquire refused with permits in hand: %+v", l.Stats())
			}
		}
		b.StopTimer()
		st := l.Stats()
		b.ReportMetric(float64(st.RemoteDecisions-before.RemoteDecisions)/float64(b.N), "remote/op")
		b.ReportMetric(float64(st.RedisCalls-before.RedisCalls)/float64(b.N)*1e6, "redis-calls/Mop")
	})
	b.Run("local", func(b *testing.B) {
		l, err := ratelimit.NewBursty(1e9)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if !l.TryAcquire(1, 0) {
				b.Fatal("TryAcquire refused")
			}
		}
	})
}

// warm brings l to steady state: demand measured, leases sized from it and
// prefetched in the background, so that a whole batch of calls is granted
// without waiting for Redis.
func warm(b *testing.B, l *Limiter) {
	b.Helper()
	const batch = 1 << 16
	for round := 0; ; round++ {
		before := l.Stats().RemoteDecisions
		granted := 0
		for range batch {
			if l.TryAcquire(1, 0) {
				granted++
			}
		}
		st := l.Stats()
		if st.Demand > 0 && st.RemoteDecisions == before && granted == batch {
			return
		}
		if round > 1000 {
			b.Fatalf("no steady state after %d calls: %+v", round*batch, st)
		}
	}
}
