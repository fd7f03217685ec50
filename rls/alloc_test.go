//go:build !race

package rls

import (
	"context"
	"testing"
)

// A call of two descriptors on the memory store allocates the response
// (the message, its list, one block for the statuses), the descriptors'
// work and results, and the two window keys: no more.
func TestShouldRateLimitAllocs(t *testing.T) {
	store, err := NewMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, benchConfig), store)
	if err != nil {
		t.Fatal(err)
	}
	req := request("bench", 0, desc("route", "/api", "user", "42"), desc("ip", "192.0.2.1"))
	ctx := context.Background()
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 8 {
		t.Errorf("%v allocations a call, want at most 8", allocs)
	}
}
