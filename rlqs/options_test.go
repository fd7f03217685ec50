package rlqs

import (
	"errors"
	"testing"
	"time"
)

// TestOptionsRejectBadValues: New returns an error wrapping
// ErrInvalidOption for each bad option, and makes no server.
func TestOptionsRejectBadValues(t *testing.T) {
	cfg := mustConfig(t, apiConfig)
	for name, o := range map[string]Option{
		"nil":                       nil,
		"settle 0":                  WithSettleTime(0),
		"allocation interval > 1m":  WithAllocationInterval(2 * time.Minute),
		"store timeout < 0":         WithStoreTimeout(-time.Second),
		"server id with a space":    WithServerID("a b"),
		"nil store hook":            WithStoreHook(nil),
		"max buckets per stream 0":  WithMaxBucketsPerStream(0),
		"max buckets per stream -1": WithMaxBucketsPerStream(-1),
	} {
		if s, err := New(cfg, nil, o); !errors.Is(err, ErrInvalidOption) || s != nil {
			t.Errorf("%s: New = %v, %v; want no server and ErrInvalidOption", name, s, err)
		}
	}
	s, err := New(cfg, nil, WithMaxBucketsPerStream(1))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Shutdown(t.Context())
}
