package redisscript

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestGateKeepsDialLogsAway: calls to a server that is not there fail as
// an outage, at once, and go-redis prints nothing about them; without a
// gate the same calls print its "failed to dial" lines (the control that
// shows the capture works). Once a server listens there, the next call
// goes through.
func TestGateKeepsDialLogsAway(t *testing.T) {
	log := redistest.CaptureClientLog(t)
	addr, release := redistest.ClosedAddrUntil(t)
	run := func(c *redis.Client, g *Gate) error {
		_, err := Call(context.Background(), time.Second, false, nil, g, func(ctx context.Context) (any, error) {
			return probe.Run(ctx, c, []string{"k"}, "x").Result()
		})
		return err
	}

	bare := newClient(t, &redis.Options{Addr: addr})
	for range 3 {
		if err := run(bare, nil); Classify(err) != Outage {
			t.Fatalf("without a gate: %v, want an outage", err)
		}
	}
	if len(log.About(addr)) == 0 {
		t.Fatalf("without a gate go-redis logged nothing about %s: the capture does not work", addr)
	}

	log = redistest.CaptureClientLog(t)
	c := newClient(t, &redis.Options{Addr: addr})
	g := NewGate(c, time.Second)
	if g == nil {
		t.Fatal("NewGate(*redis.Client) = nil")
	}
	for i := range 20 {
		err := run(c, g)
		if !errors.Is(err, ErrUnreachable) || Classify(err) != Outage {
			t.Fatalf("call %d: %v, want ErrUnreachable, an outage", i, err)
		}
	}
	if lines := log.About(addr); len(lines) > 0 {
		t.Fatalf("with a gate go-redis still logged:\n%s", strings.Join(lines, "\n"))
	}

	mr := miniredis.NewMiniRedis()
	release()
	if err := mr.StartAddr(addr); err != nil {
		t.Fatalf("starting a server on %s: %v", addr, err)
	}
	t.Cleanup(mr.Close)
	if err := run(c, g); err != nil {
		t.Fatalf("first call after the server came: %v", err)
	}
	if lines := log.About(addr); len(lines) > 0 {
		t.Fatalf("go-redis logged:\n%s", strings.Join(lines, "\n"))
	}
}

// replyErr is an error reply of the server's (redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestGateStates walks a Gate through its states with a dialer the test
// answers, in a synctest bubble (so "waiting" and "not dialing" are
// observed, not guessed).
func TestGateStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answers := make(chan error)
		var dials atomic.Int32
		g := &Gate{timeout: time.Second, dial: func(ctx context.Context) error {
			dials.Add(1)
			select {
			case err := <-answers:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
		refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
		ctx := context.Background()

		// Before the first answer, every caller waits for the one probe.
		errs := make(chan error, 3)
		for range 3 {
			go func() { errs <- g.Enter(ctx) }()
		}
		synctest.Wait()
		if n := dials.Load(); n != 1 || len(errs) != 0 {
			t.Fatalf("before the first answer: %d dials, %d callers answered; want 1 dial, all waiting", n, len(errs))
		}
		answers <- nil
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatalf("a reachable server at start: %v", err)
			}
		}

		// Up: no dials; replies and the caller's own end keep it up.
		for _, err := range []error{nil, replyErr("LOADING Redis is loading"), replyErr("WRONGTYPE x"), context.Canceled} {
			g.Leave(err)
			if err := g.Enter(ctx); err != nil {
				t.Fatalf("after Leave(%v): %v", err, err)
			}
		}
		if n := dials.Load(); n != 1 {
			t.Fatalf("%d dials while up, want none after the first", n)
		}

		// A call that could not reach the server closes the gate: the
		// next caller probes, and those who come meanwhile wait for the
		// same probe instead of dialing their own.
		g.Leave(refused)
		for range 2 {
			go func() { errs <- g.Enter(ctx) }()
		}
		synctest.Wait()
		if n := dials.Load(); n != 2 || len(errs) != 0 {
			t.Fatalf("after the failure: %d dials, %d callers answered; want one probe, all waiting", n, len(errs))
		}
		answers <- refused
		for range 2 {
			if err := <-errs; !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "connection refused") || Classify(err) != Outage {
				t.Fatalf("waiting on a failed probe: %v, want ErrUnreachable with the dial's error", err)
			}
		}

		// Down: the next caller probes again (no wait between probes);
		// a probe that hangs ends at the gate's timeout, not later.
		start := time.Now()
		if err := g.Enter(ctx); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("hanging probe: %v", err)
		}
		if took := time.Since(start); took != time.Second {
			t.Fatalf("hanging probe took %v, want the gate's timeout", took)
		}

		// A caller whose context ends first gets its context's error;
		// the probe goes on and its answer stands.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if err := g.Enter(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("caller's deadline: %v", err)
		}
		answers <- nil
		synctest.Wait()
		if err := g.Enter(ctx); err != nil {
			t.Fatalf("after the probe found the server: %v", err)
		}
		if n := dials.Load(); n != 4 {
			t.Fatalf("%d dials in all, want 4", n)
		}
	})
}

// TestGatePanickingDialer: a dialer that panics is an unreachable server,
// not a crash.
func TestGatePanickingDialer(t *testing.T) {
	g := &Gate{timeout: time.Second, dial: func(context.Context) error { panic("boom") }}
	if err := g.Enter(context.Background()); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Enter: %v", err)
	}
}

// TestNewGateClients: the clients a Gate can see into, and a nil Gate that
// lets every call through.
func TestNewGateClients(t *testing.T) {
	mr := miniredis.RunT(t)
	for _, c := range []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: mr.Addr()}),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{redistest.ClosedAddr(t), mr.Addr()}}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": mr.Addr()}}),
	} {
		t.Cleanup(func() { _ = c.Close() })
		g := NewGate(c, time.Second)
		if g == nil {
			t.Fatalf("%T: no gate", c)
		}
		if err := g.Enter(context.Background()); err != nil {
			t.Fatalf("%T: %v (a cluster tries each seed address)", c, err)
		}
	}
	var nilGate *Gate
	if err := nilGate.Enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	nilGate.Leave(errors.New("x"))
	if NewGate(struct{ redis.UniversalClient }{}, time.Second) != nil {
		t.Fatal("a gate for a client it cannot see into")
	}
}

// TestRefineReplica: READONLY from the one server of a plain client is a
// replica, set up wrong (ErrReplica), raw or as a package's Error; from
// Sentinel's client or a cluster's, or through no gate, it stays an
// outage (a failover), and so does every other outage.
func TestRefineReplica(t *testing.T) {
	readonly := replyError("READONLY You can't write against a read only replica.")
	plain := NewGate(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), time.Second)
	sentinel := NewGate(redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}), time.Second)
	cluster := NewGate(redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), time.Second)
	if sentinel == nil || cluster == nil {
		t.Fatal("no gate for Sentinel's or a cluster's client")
	}
	for _, err := range []error{readonly, &Error{Room: "x", Class: Outage, Err: readonly}} {
		got := plain.Refine(err)
		var e *Error
		if Classify(got) != Misconfigured || !errors.Is(got, ErrReplica) || !IsReply(got) || !strings.Contains(got.Error(), "READONLY") {
			t.Errorf("plain client, %v: %v (%v)", err, got, Classify(got))
		}
		if errors.As(err, &e) && (!errors.As(got, &e) || e.Room != "x" || !errors.Is(got, ErrMisconfigured) || errors.Is(got, ErrUnavailable)) {
			t.Errorf("plain client, %v: %#v", err, got)
		}
		for name, g := range map[string]*Gate{"sentinel": sentinel, "cluster": cluster, "none": nil} {
			if got := g.Refine(err); got != err {
				t.Errorf("%s client, %v: %v", name, err, got)
			}
		}
	}
	for _, err := range []error{replyError("LOADING Redis is loading the dataset in memory"), errors.New("READONLY in a text that is no reply"), nil} {
		if got := plain.Refine(err); got != err {
			t.Errorf("plain client, %v: %v", err, got)
		}
	}
}

// TestCallOnReplica: a script run through Call against a real replica
// with a plain client fails as set up wrong, and the gate stays open (the
// server answers).
func TestCallOnReplica(t *testing.T) {
	replica := redistest.StartReplica(t, redistest.Start(t))
	c := newClient(t, &redis.Options{Addr: replica.Addr()})
	g := NewGate(c, time.Second)
	for range 2 {
		_, err := Call(context.Background(), 2*time.Second, false, nil, g, func(ctx context.Context) (any, error) {
			return probe.Run(ctx, c, []string{"k"}, "x").Result()
		})
		if Classify(err) != Misconfigured || !errors.Is(err, ErrReplica) || !g.Open() {
			t.Fatalf("a script on a replica: %v (%v), gate open %v", err, Classify(err), g.Open())
		}
	}
}
