package rls

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/distributed"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/throttle"
)

// windowAndAddition is a rule with a reference window and a rule with an
// addition (throttle's store under rls).
const windowAndAddition = `
domain: d
descriptors:
  - key: w
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: g
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}
`

// failures gathers, for one Redis condition, the error each package
// returns: throttle's limiter, rls's windows (counting every hit, and only
// admitted ones: two scripts' paths) and additions (through a Service),
// and distributed's limiter (failing closed).
func failures(t *testing.T, opts *redis.Options) map[string]error {
	t.Helper()
	ctx := context.Background()
	newClient := func() *redis.Client {
		o := *opts
		o.MaxRetries, o.ContextTimeoutEnabled = -1, true
		c := redis.NewClient(&o)
		t.Cleanup(func() { c.Close() })
		return c
	}
	got := map[string]error{}

	ts, err := throttle.NewRedisStore(newClient())
	if err != nil {
		t.Fatal(err)
	}
	lim, err := throttle.New(ts, throttle.GCRA, throttle.PerMinute(10))
	if err != nil {
		t.Fatal(err)
	}
	_, got["throttle"] = lim.Allow(ctx, "k")

	store, err := NewRedisStore(newClient())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, windowAndAddition), store, WithStoreTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, got["rls window"] = svc.ShouldRateLimit(ctx, request("d", 0, desc("w", "1")))
	_, got["rls addition"] = svc.ShouldRateLimit(ctx, request("d", 0, desc("g", "1")))
	admitted, err := New(parseYAML(t, windowAndAddition), store, WithStoreTimeout(200*time.Millisecond), WithCountOnlyAdmitted())
	if err != nil {
		t.Fatal(err)
	}
	_, got["rls window, only admitted"] = admitted.ShouldRateLimit(ctx, request("d", 0, desc("w", "1")))

	dl, err := distributed.New(newClient(), "failures", 10, distributed.WithFailurePolicy(distributed.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dl.Close(context.Background()) })
	_, got["distributed"] = dl.Acquire(ctx, 1)
	return got
}

// TestOneSetOfFailureErrors: throttle, rls and distributed share one value
// for each failure class, so that the same failure matches every
// package's sentinel whichever package returned it, a timeout (a hung
// server) included; and the error names the package that returned it
// once, in front ("rls: redis unavailable: dial tcp ...", not "throttle:
// redis unavailable: throttle: store failed: ...").
func TestOneSetOfFailureErrors(t *testing.T) {
	for _, same := range [][]error{
		{ErrUnavailable, throttle.ErrUnavailable, distributed.ErrUnavailable},
		{ErrMisconfigured, throttle.ErrMisconfigured, distributed.ErrMisconfigured},
		{ErrStore, throttle.ErrStore, distributed.ErrStore},
	} {
		for _, e := range same[1:] {
			if e != same[0] {
				t.Errorf("%q and %q are different values", same[0], e)
			}
		}
	}
	if !errors.Is(ErrUnavailable, ErrStore) || !errors.Is(ErrMisconfigured, ErrStore) || errors.Is(ErrUnavailable, ErrMisconfigured) {
		t.Error("an outage and a misconfiguration must be store failures, and not each other")
	}

	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "secret")
	checkFailures(t, "nothing listening", redis.Options{Addr: redistest.ClosedAddr(t)}, ErrUnavailable)
	checkFailures(t, "no password", redis.Options{Addr: srv.Addr()}, ErrMisconfigured)
	hung := redistest.Start(t)
	hung.Pause()
	defer hung.Resume()
	checkFailures(t, "hung (SIGSTOP)", redis.Options{Addr: hung.Addr()}, ErrUnavailable)
}

// TestOutOfMemoryIsAnOutage: a Redis out of memory (maxmemory reached,
// noeviction) refuses every write with OOM: an outage of the store on
// every path, not a misconfiguration, and for the reference's windows not
// "a window holds something other than a count" (the script took the
// server's refusal for one key's).
func TestOutOfMemoryIsAnOutage(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction")
	checkFailures(t, "out of memory", redis.Options{Addr: srv.Addr()}, ErrUnavailable)
}

// TestReplicaIsMisconfigured: a plain client given a replica's address
// gets READONLY for every write: set up wrong on every path (no retry
// fixes it, and failing open on it would run unlimited), not an outage.
func TestReplicaIsMisconfigured(t *testing.T) {
	replica := redistest.StartReplica(t, redistest.Start(t))
	checkFailures(t, "a replica", redis.Options{Addr: replica.Addr()}, ErrMisconfigured)
}

// checkFailures holds every package's error for one Redis condition
// (failures) to class, ErrUnavailable or ErrMisconfigured: it matches
// class and ErrStore, whichever package's values, and not the other
// class; rls answers UNAVAILABLE for an outage and INTERNAL for a
// misconfiguration; and the text names its package once, in front,
// followed by the class's words.
func checkFailures(t *testing.T, condition string, opts redis.Options, class error) {
	t.Helper()
	other, what, code := ErrMisconfigured, "redis unavailable", codes.Unavailable
	if class == ErrMisconfigured {
		other, what, code = ErrUnavailable, "redis misconfigured", codes.Internal
	}
	for who, err := range failures(t, &opts) {
		for _, sentinel := range []error{class, throttle.ErrStore, distributed.ErrStore} {
			if !errors.Is(err, sentinel) {
				t.Errorf("%s, %s: %v does not match %q", condition, who, err, sentinel)
			}
		}
		if errors.Is(err, other) {
			t.Errorf("%s, %s: %v matches %q", condition, who, err, other)
		}
		room, _, _ := strings.Cut(who, " ")
		text := err.Error()
		if st, ok := grpcstatus.FromError(err); ok && room == "rls" {
			if st.Code() != code {
				t.Errorf("%s, %s: code %v, want %v", condition, who, st.Code(), code)
			}
			text = st.Message()
		}
		if !strings.HasPrefix(text, room+": "+what+": ") {
			t.Errorf("%s, %s: %q does not begin with %q", condition, who, text, room+": "+what+": ")
		}
		for _, r := range []string{"throttle", "rls", "distributed", "store failed"} {
			if n := strings.Count(text, r); n > 1 || n == 1 && r != room {
				t.Errorf("%s, %s: %q names %q %d times", condition, who, text, r, n)
			}
		}
	}
}

// TestRedisKilledUnderLoadFailsFast: Redis killed while calls run, with a
// client whose retries outlast the store timeout (as go-redis's default
// backoff outlasts the command's 50 ms): the calls that met the dead server
// wait out the store timeout, and the gate closes on them; every later
// call answers UNAVAILABLE at once (an outage: ErrUnavailable and
// ErrStore, what the outage log counts), for the reference's windows and
// for the additions alike. Before, each call waited the whole store
// timeout, and its error, the caller's context's, closed nothing.
func TestRedisKilledUnderLoadFailsFast(t *testing.T) {
	const (
		storeTimeout = time.Second
		fast         = 200 * time.Millisecond // generous, well under the store timeout
		workers      = 4
		slowAllowed  = 2 // per worker: the calls that met the dead server
	)
	for _, c := range []struct{ name, key string }{{"windows", "w"}, {"additions", "g"}} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			o := &redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, DialerRetries: 1}
			redistest.SlowRetries(o)
			client := redis.NewClient(o)
			t.Cleanup(func() { client.Close() })
			store, err := NewRedisStore(client)
			if err != nil {
				t.Fatal(err)
			}
			svc, err := New(parseYAML(t, windowAndAddition), store, WithStoreTimeout(storeTimeout))
			if err != nil {
				t.Fatal(err)
			}
			req := request("d", 0, desc(c.key, "1"))
			calls := redistest.KillUnderLoad(t, srv, workers, 12, func() error {
				_, err := svc.ShouldRateLimit(context.Background(), req)
				return err
			})
			redistest.CheckFast(t, calls, fast, slowAllowed)
			for w, cs := range calls {
				for i, call := range cs {
					if grpcstatus.Code(call.Err) != codes.Unavailable || !errors.Is(call.Err, ErrUnavailable) || !errors.Is(call.Err, ErrStore) {
						t.Errorf("worker %d, call %d after the kill: %v; want UNAVAILABLE, ErrUnavailable and ErrStore", w, i, call.Err)
					}
				}
			}
		})
	}
}
