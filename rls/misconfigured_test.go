package rls

import (
	"context"
	"errors"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// TestMisconfiguredIsNotAnOutage: a Redis that refuses the password after
// start is answered INTERNAL (not UNAVAILABLE, an outage's code), wraps
// ErrMisconfigured, and is counted by store_misconfigured as well as
// store_errors.
func TestMisconfiguredIsNotAnOutage(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireAuth("right")
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	store, err := NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, fiveRules), store)
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.ShouldRateLimit(context.Background(), request("d", 0, desc("a", "1")))
	if grpcstatus.Code(err) != codes.Internal || !errors.Is(err, ErrMisconfigured) || errors.Is(err, ErrUnavailable) {
		t.Errorf("wrong password: %v, want INTERNAL wrapping ErrMisconfigured", err)
	}
	if c := svc.Counts(); c.StoreMisconfigured != 1 || c.StoreErrors != 1 {
		t.Errorf("counted %+v, want one store error, misconfigured", c)
	}
}
