package rls

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// The bench's call: two descriptors, each matched at its second level.
const benchConfig = `
domain: bench
descriptors:
  - key: route
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 1000000}
`

func benchmarkService(b *testing.B, store Store) {
	svc, err := New(parseYAML(b, benchConfig), store)
	if err != nil {
		b.Fatal(err)
	}
	req := request("bench", 0, desc("route", "/api", "user", "42"), desc("ip", "192.0.2.1"))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkShouldRateLimitMemory(b *testing.B) {
	store, err := NewMemoryStore()
	if err != nil {
		b.Fatal(err)
	}
	benchmarkService(b, store)
}

func BenchmarkShouldRateLimitRedis(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	store, err := NewRedisStore(c)
	if err != nil {
		b.Fatal(err)
	}
	benchmarkService(b, store)
}
