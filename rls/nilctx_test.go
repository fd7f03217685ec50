package rls

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// TestNilContext: a nil context is a caller's bug answered
// INVALID_ARGUMENT (wrapping ErrNilContext), never a panic, on either
// store and with a store timeout (context.WithTimeout panics on nil).
func TestNilContext(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		svc, err := New(parseYAML(t, fiveRules), newStore(newTestClock(T0)), WithStoreTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var nilCtx context.Context
		_, err = svc.ShouldRateLimit(nilCtx, request("d", 0, desc("a", "1"), desc("f", "1")))
		if grpcstatus.Code(err) != codes.InvalidArgument || !errors.Is(err, ErrNilContext) {
			t.Errorf("nil context: %v, want INVALID_ARGUMENT wrapping ErrNilContext", err)
		}
	})
}
