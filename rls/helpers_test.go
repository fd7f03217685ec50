package rls

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/throttle"
)

// testClock is a clock the test sets; Sleep is not used by the stores.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock(unix int64) *testClock { return &testClock{t: time.Unix(unix, 0)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Sleep(ctx context.Context, d time.Duration) error { return nil }

func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// T0 is the tests' time: 1 700 000 000 s, 20 s into a minute, 800 s into
// an hour, 80 000 s into a day.
const T0 = 1_700_000_000

// storeKinds runs f on a memory store and on a real redis-server, each
// with clock.
func storeKinds(t *testing.T, f func(t *testing.T, newStore func(clock *testClock, opts ...StoreOption) Store)) {
	t.Run("memory", func(t *testing.T) {
		f(t, func(clock *testClock, opts ...StoreOption) Store {
			s, err := NewMemoryStore(append([]StoreOption{WithStoreClock(clock)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		f(t, func(clock *testClock, opts ...StoreOption) Store {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { c.Close() })
			if err := c.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			s, err := NewRedisStore(c, append([]StoreOption{WithStoreClock(clock)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func mustLoad(t testing.TB, path string, opts ...LoadOption) *Config {
	t.Helper()
	c, err := LoadConfig(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func parseYAML(t testing.TB, yaml string) *Config {
	t.Helper()
	c, err := ParseConfig([]File{{Name: "test.yaml", Content: []byte(yaml)}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func withLimit(d *ratelimitv3.RateLimitDescriptor, n uint32, u rlsv3.RateLimitResponse_RateLimit_Unit) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit(u)}
	return d
}

func request(domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
	sec  = rlsv3.RateLimitResponse_RateLimit_SECOND
	mnt  = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hr   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day  = rlsv3.RateLimitResponse_RateLimit_DAY
	week = rlsv3.RateLimitResponse_RateLimit_WEEK
	mon  = rlsv3.RateLimitResponse_RateLimit_MONTH
	year = rlsv3.RateLimitResponse_RateLimit_YEAR
)

// status is a matched descriptor's status.
func status(code rlsv3.RateLimitResponse_Code, name string, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, reset int64) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: durationpb.New(time.Duration(reset) * time.Second),
	}
}

// noLimit is an unmatched (or replaced) descriptor's status.
func noLimit() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}
}

// unlimited is an unlimited descriptor's status.
func unlimitedStatus() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}
}

func response(code rlsv3.RateLimitResponse_Code, ss ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: code, Statuses: ss}
}

func checkResponse(t *testing.T, what string, got, want *rlsv3.RateLimitResponse) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("%s:\n got %s\nwant %s", what, prototext.Format(got), prototext.Format(want))
	}
}

func mustThrottleMemory(t testing.TB, clock *testClock) *throttle.MemoryStore {
	t.Helper()
	s, err := throttle.NewMemoryStore(throttle.WithStoreClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
