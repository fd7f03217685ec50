package redisscript

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestErrorReadsAndMatches: an Error names its room once, then what
// failed, then the cause; it matches ErrStore, its class's sentinel, its
// kind and its cause, and nothing else.
func TestErrorReadsAndMatches(t *testing.T) {
	cause := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	kind := errors.New("a sentinel of the room's")
	for _, c := range []struct {
		err       *Error
		text      string
		match     []error
		dontMatch []error
	}{
		{&Error{Room: "rls", Class: Outage, Err: cause}, "rls: redis unavailable: " + cause.Error(),
			[]error{ErrStore, ErrUnavailable, cause}, []error{ErrMisconfigured, kind}},
		{&Error{Room: "throttle", Class: Misconfigured, Kind: kind, Err: cause}, "throttle: redis misconfigured: " + cause.Error(),
			[]error{ErrStore, ErrMisconfigured, kind, cause}, []error{ErrUnavailable}},
		{&Error{Room: "rls", Class: Bug, Err: cause}, "rls: store failed: " + cause.Error(),
			[]error{ErrStore, cause}, []error{ErrUnavailable, ErrMisconfigured}},
		{&Error{Room: "throttle", Class: Cancelled, Err: context.Canceled}, "throttle: store failed: context canceled",
			[]error{ErrStore, context.Canceled}, []error{ErrUnavailable, ErrMisconfigured}},
		{&Error{Room: "distributed", Class: Outage}, "distributed: redis unavailable", []error{ErrStore, ErrUnavailable}, nil},
	} {
		if got := c.err.Error(); got != c.text {
			t.Errorf("%#v reads %q, want %q", c.err, got, c.text)
		}
		for _, m := range c.match {
			if !errors.Is(c.err, m) {
				t.Errorf("%q does not match %q", c.err, m)
			}
		}
		for _, m := range c.dontMatch {
			if errors.Is(c.err, m) {
				t.Errorf("%q matches %q", c.err, m)
			}
		}
		if got := Classify(fmt.Errorf("wrapped: %w", c.err)); got != c.err.Class {
			t.Errorf("Classify(%q) = %v, want its class %v", c.err, got, c.err.Class)
		}
	}
	// A sentinel wrapped by hand is still a store failure of its class.
	if err := fmt.Errorf("%w: x", ErrUnavailable); !errors.Is(err, ErrStore) || Classify(err) != Outage {
		t.Errorf("%q: ErrStore %v, class %v", err, errors.Is(err, ErrStore), Classify(err))
	}
	if err := fmt.Errorf("%w: x", ErrMisconfigured); !errors.Is(err, ErrStore) || Classify(err) != Misconfigured {
		t.Errorf("%q: ErrStore %v, class %v", err, errors.Is(err, ErrStore), Classify(err))
	}
}

// TestFail: a call's error classified as a room's; another room's Error
// renamed, with its class and kind.
func TestFail(t *testing.T) {
	if Fail("rls", nil) != nil {
		t.Error("Fail(nil) is not nil")
	}
	oom := replyError("OOM command not allowed when used memory > 'maxmemory'.")
	err := Fail("rls", oom)
	if !errors.Is(err, ErrUnavailable) || err.Error() != "rls: redis unavailable: "+string(oom) {
		t.Errorf("Fail(OOM) = %q", err)
	}
	if Fail("rls", err) != err {
		t.Error("an Error of the same room was not returned as it is")
	}
	kind := errors.New("kind")
	th := fmt.Errorf("check 2: %w", &Error{Room: "throttle", Class: Misconfigured, Kind: kind, Err: oom})
	err = Fail("rls", th)
	if !errors.Is(err, kind) || !errors.Is(err, ErrMisconfigured) || err.Error() != "rls: redis misconfigured: "+string(oom) {
		t.Errorf("Fail(throttle's) = %q", err)
	}
}

// TestBoundIsAnOutage: a context a Bound made ends as an outage (its
// cause wraps ErrTimeout, not context.DeadlineExceeded); the caller's own
// deadline, and a parent's that comes first, end as the caller's
// (Cancelled). Ended keeps a real failure and reads a bare context error
// by what ended the context.
func TestBoundIsAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBound(50 * time.Millisecond)
		ctx, cancel := b.Within(context.Background())
		defer cancel()
		if CtxErr(ctx) != nil {
			t.Fatal("CtxErr of a running context")
		}
		time.Sleep(50 * time.Millisecond)
		synctest.Wait() // the context's timer has fired
		err := CtxErr(ctx)
		if !errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || Classify(err) != Outage {
			t.Errorf("the bound's end: %v (class %v), want ErrTimeout, an outage", err, Classify(err))
		}
		if e := Ended(ctx, context.DeadlineExceeded); !errors.Is(e, ErrTimeout) || Classify(e) != Outage {
			t.Errorf("Ended(bound, deadline) = %v", e)
		}
		refused := errors.New("dial tcp: connection refused")
		if e := Ended(ctx, refused); e != refused {
			t.Errorf("Ended(bound, a refused dial) = %v, want the dial's error", e)
		}

		own, cancelOwn := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancelOwn()
		inner, cancelInner := b.Within(own)
		defer cancelInner()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		for _, c := range []context.Context{own, inner} {
			if err := CtxErr(c); !errors.Is(err, context.DeadlineExceeded) || Classify(err) != Cancelled {
				t.Errorf("the caller's deadline: %v (class %v), want context.DeadlineExceeded", err, Classify(err))
			}
		}
		if e := Ended(inner, fmt.Errorf("redis: %w", context.DeadlineExceeded)); Classify(e) != Cancelled {
			t.Errorf("Ended(caller's deadline) = %v, class %v", e, Classify(e))
		}
		// Another room's error, classified already, is not wrapped again
		// (which would name its room a second time).
		th := &Error{Room: "throttle", Class: Cancelled, Err: context.DeadlineExceeded}
		if e := Ended(inner, th); e != th {
			t.Errorf("Ended(an Error) = %v, want it as it is", e)
		}

		zero, cancelZero := Bound{}.Within(context.Background())
		defer cancelZero()
		if _, ok := zero.Deadline(); ok {
			t.Error("the zero Bound set a deadline")
		}
	})
}

// TestCallUnderABound: a call whose parent context a Bound ended is an
// outage (ErrTimeout), not the caller's deadline, and it closes the gate.
func TestCallUnderABound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials atomic.Int32
		g := &Gate{timeout: time.Second, dial: func(context.Context) error { dials.Add(1); return nil }}
		if err := g.Enter(context.Background()); err != nil || !g.Open() {
			t.Fatalf("first probe: %v", err)
		}
		for _, inline := range []bool{true, false} {
			ctx, cancel := NewBound(20 * time.Millisecond).Within(context.Background())
			_, err := Call(ctx, time.Minute, inline, nil, g, func(ctx context.Context) (int, error) {
				<-ctx.Done()
				return 0, ctx.Err()
			})
			cancel()
			if !errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || Classify(err) != Outage {
				t.Errorf("inline %v: %v (class %v), want ErrTimeout, an outage", inline, err, Classify(err))
			}
			if g.Open() {
				t.Errorf("inline %v: the gate stayed open after a call that had no answer in time", inline)
			}
			if err := g.Enter(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if n := dials.Load(); n != 3 {
			t.Errorf("%d probes, want 3", n)
		}
	})
}

// TestGateClosesOnDeadline: a call that ended on its context's deadline
// closes the gate, whoever's deadline it was (a client that retries a dead
// server's refused dials until the deadline reports only the deadline);
// a cancellation leaves it open.
func TestGateClosesOnDeadline(t *testing.T) {
	g := &Gate{timeout: time.Second, dial: func(context.Context) error { return nil }}
	ctx := context.Background()
	if err := g.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	g.Leave(fmt.Errorf("caller's: %w", context.Canceled))
	if !g.Open() {
		t.Fatal("a cancellation closed the gate")
	}
	g.Leave(fmt.Errorf("redis: %w", context.DeadlineExceeded))
	if g.Open() {
		t.Fatal("a call that ran out its deadline left the gate open")
	}
}

// TestClassifyScriptErrors: a server's outage reply inside a script's
// error is an outage, as Redis 6 reports a command's failure in a script
// ("... @user_script: 1: -OOM ...") and Redis 7 as the command's reply.
func TestClassifyScriptErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Class
	}{
		{replyError("ERR Error running script (call to f_1a2b): @user_script:12: @user_script: 12: -OOM command not allowed when used memory > 'maxmemory'. "), Outage},
		{replyError("OOM command not allowed when used memory > 'maxmemory'. script: 1a2b, on @user_script:12."), Outage},
		{replyError("ERR Error running script (call to f_1a2b): @user_script:3: @user_script: 3: -READONLY You can't write against a read only replica. "), Outage},
		{replyError("ERR Error running script (call to f_1a2b): @user_script:3: user_script:3: attempt to compare nil with number "), Bug},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%q) = %v, want %v", c.err, got, c.want)
		}
	}
}
