package rlqstest

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fake is a server that records reports and sends what a test tells it.
type fake struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	mu      sync.Mutex
	reports []*rlqsv3.RateLimitQuotaUsageReports
	send    chan *rlqsv3.RateLimitQuotaResponse
}

func (f *fake) StreamRateLimitQuotas(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	go func() {
		for r := range f.send {
			if s.Send(r) != nil {
				return
			}
		}
	}()
	for {
		m, err := s.Recv()
		if err != nil {
			return nil
		}
		f.mu.Lock()
		f.reports = append(f.reports, m)
		f.mu.Unlock()
	}
}

func (f *fake) taken() []*rlqsv3.RateLimitQuotaUsageReports {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*rlqsv3.RateLimitQuotaUsageReports(nil), f.reports...)
}

var id = map[string]string{"name": "b"}

func assign(s *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: s}},
	}}}
}

func tb(max, perFill uint32, fill time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: max, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill)}}}
}

func deny() *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
}

func run(t *testing.T, cfg Config, f func(t *testing.T, e *Envoy, srv *fake)) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fake{send: make(chan *rlqsv3.RateLimitQuotaResponse, 16)}
		var n Network
		g := n.Serve(srv)
		conn := n.Dial()
		cfg.Domain = "d"
		e := New(conn, cfg)
		f(t, e, srv)
		e.Close()
		_ = conn.Close()
		close(srv.send)
		g.Stop()
	})
}

// TestReports: the first request is reported at once, alone, with a
// time_elapsed of 0; then every interval reports the counts since, with
// the time in whole seconds.
func TestReports(t *testing.T) {
	run(t, Config{ReportingInterval: 1500 * time.Millisecond}, func(t *testing.T, e *Envoy, srv *fake) {
		if !e.Request(id) {
			t.Fatal("first request denied without a no-assignment rule")
		}
		time.Sleep(time.Millisecond)
		r := srv.taken()
		if len(r) != 1 || r[0].GetDomain() != "d" || r[0].GetBucketQuotaUsages()[0].GetNumRequestsAllowed() != 1 ||
			r[0].GetBucketQuotaUsages()[0].GetTimeElapsed().AsDuration() != 0 {
			t.Fatalf("first report: %v", r)
		}
		e.Request(id)
		e.Request(id)
		time.Sleep(1500 * time.Millisecond)
		r = srv.taken()
		u := r[len(r)-1].GetBucketQuotaUsages()[0]
		if len(r) != 2 || u.GetNumRequestsAllowed() != 2 || u.GetTimeElapsed().AsDuration() != time.Second {
			t.Fatalf("periodic report: %v", r)
		}
	})
}

// TestTokenBucket: an assignment's token bucket starts full and refills at
// tokens_per_fill per whole second of fill_interval; the same bucket again
// (max_tokens, tokens_per_fill, fill_interval's nanoseconds equal) only
// extends it; the time to live counts whole seconds, and on expiry the
// bucket runs the fallback for its timeout, then the no-assignment rule.
func TestTokenBucket(t *testing.T) {
	run(t, Config{NoAssignment: deny(), Expired: tb(1, 1, time.Second), ExpiredTimeout: 5 * time.Second}, func(t *testing.T, e *Envoy, srv *fake) {
		if e.Request(id) {
			t.Fatal("first request allowed under DENY_ALL")
		}
		srv.send <- assign(tb(3, 10, 1900*time.Millisecond), 2500*time.Millisecond) // 10/s, TTL 2 s
		time.Sleep(time.Millisecond)
		allowed := 0
		for range 5 {
			if e.Request(id) {
				allowed++
			}
		}
		if allowed != 3 {
			t.Fatalf("a full bucket of 3 allowed %d", allowed)
		}
		time.Sleep(100 * time.Millisecond) // one token at 10/s
		if !e.Request(id) || e.Request(id) {
			t.Fatal("refill is not 10/s")
		}
		// The same bucket with other seconds of fill_interval: Envoy
		// keeps the one it runs (still empty).
		srv.send <- assign(tb(3, 10, 7900*time.Millisecond), 2*time.Second)
		time.Sleep(time.Millisecond)
		if e.Request(id) {
			t.Fatal("the bucket was replaced")
		}
		if tot := e.Totals(id); tot.TokenBuckets != 1 || tot.Capacity != 3 || tot.Assignments != 2 {
			t.Fatalf("totals %+v", tot)
		}
		time.Sleep(2 * time.Second) // the TTL of the second assignment
		if st := e.State(id); !st.Fallback || st.Rate != 1 {
			t.Fatalf("after expiry: %+v", st)
		}
		time.Sleep(5 * time.Second)
		if st := e.State(id); st.Assigned || st.Fallback || e.Request(id) {
			t.Fatalf("after the fallback: %+v", st)
		}
	})
}

// TestAbandonAndTTLZero: a TTL of 0 expires at once; an abandon erases the
// bucket, and the next request subscribes again.
func TestAbandonAndTTLZero(t *testing.T) {
	run(t, Config{}, func(t *testing.T, e *Envoy, srv *fake) {
		e.Request(id)
		srv.send <- assign(deny(), 0)
		time.Sleep(time.Millisecond)
		if st := e.State(id); st.Assigned || !e.Request(id) {
			t.Fatalf("TTL 0: %+v", st)
		}
		srv.send <- &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
			BucketId:     &rlqsv3.BucketId{Bucket: id},
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
		}}}
		time.Sleep(time.Millisecond)
		if e.State(id).Known {
			t.Fatal("not abandoned")
		}
		n := len(srv.taken())
		e.Request(id)
		time.Sleep(time.Millisecond)
		if r := srv.taken(); len(r) != n+1 {
			t.Fatalf("no new subscription: %v", r)
		}
	})
}

// TestDrive: Drive sends its rate, evenly, until its context ends; and a
// TTL of 0 is counted as such.
func TestDrive(t *testing.T) {
	run(t, Config{}, func(t *testing.T, e *Envoy, srv *fake) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		n := e.Drive(ctx, id, 50)
		tot := e.Totals(id)
		if n < 100 || n > 101 || tot.Allowed+tot.Denied != uint64(n) {
			t.Fatalf("Drive at 50/s for 2 s sent %d; totals %+v", n, tot)
		}
		srv.send <- assign(deny(), 0)
		time.Sleep(time.Millisecond)
		if tot := e.Totals(id); tot.ZeroTTL != 1 || tot.Expiries != 1 {
			t.Fatalf("after a TTL of 0: %+v", tot)
		}
	})
}
