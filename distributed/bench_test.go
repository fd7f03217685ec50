package distributed

import (
	"context"
	"testing"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// BenchmarkTryAcquireLocal measures the local path: a limiter whose pool is
// kept full by background prefetches (rate far above the request rate), so
// that almost every call is decided in memory.
func BenchmarkTryAcquireLocal(b *testing.B) {
	srv := redistest.Start(b)
	l, err := New(newClient(b, srv), "bench", 1e9, WithProcessID("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	l.TryAcquire(1, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l.TryAcquire(1, 0)
	}
	b.StopTimer()
	st := l.Stats()
	b.ReportMetric(float64(st.LocalDecisions)/float64(st.LocalDecisions+st.RemoteDecisions), "local-share")
}
