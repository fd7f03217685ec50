package redisscript

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// replyError is an error reply as go-redis reports one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestClassifyTable: each error a Redis call can give, as text or as the
// client's value, and its class.
func TestClassifyTable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Class
	}{
		{nil, OK},
		// Outages.
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}, Outage},
		{fmt.Errorf("dial tcp 127.0.0.1:1: connect: connection refused"), Outage},
		{io.EOF, Outage},
		{io.ErrUnexpectedEOF, Outage},
		{redis.ErrPoolTimeout, Outage},
		{fmt.Errorf("%w after 50ms", ErrTimeout), Outage},
		{replyError("LOADING Redis is loading the dataset in memory"), Outage},
		{replyError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), Outage},
		{replyError("CLUSTERDOWN The cluster is down"), Outage},
		{replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), Outage},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), Outage},
		{replyError("READONLY You can't write against a read only replica."), Outage},
		{replyError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), Outage},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), Outage},
		{replyError("NOREPLICAS Not enough good replicas to write."), Outage},
		{replyError("ERR Script killed by user with SCRIPT KILL..."), Outage},
		// Misconfigurations: as replies, and as plain text (a wrapper
		// that lost go-redis's type).
		{replyError("ERR DB index is out of range"), Misconfigured},
		{errors.New("ERR DB index is out of range"), Misconfigured},
		{replyError("ERR invalid DB index"), Misconfigured},
		{replyError("NOAUTH Authentication required."), Misconfigured},
		{errors.New("NOAUTH Authentication required."), Misconfigured},
		{replyError("ERR Protocol error: unauthenticated multibulk length"), Misconfigured},
		{replyError("WRONGPASS invalid username-password pair or user is disabled."), Misconfigured},
		{replyError("NOPERM User x has no permissions to run the 'evalsha' command"), Misconfigured},
		{replyError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"), Misconfigured},
		{replyError("ERR This instance has cluster support disabled"), Misconfigured},
		{replyError("MOVED 3999 127.0.0.1:6381"), Misconfigured},
		{replyError("ASK 3999 127.0.0.1:6381"), Misconfigured},
		{replyError("CROSSSLOT Keys in request don't hash to the same slot"), Misconfigured},
		{replyError("ERR unknown command 'EVALSHA', with args beginning with: "), Misconfigured},
		{replyError("ERR Error running script (call to f_x): @user_script:1: @user_script: 1: Unknown Redis command called from script"), Misconfigured},
		{replyError("ERR Error compiling script (new function): user_script:1: unexpected symbol near '+'"), Misconfigured},
		{replyError("ERR Error compiling script (new function): <string> line:1(column:2) near '42':   syntax error "), Misconfigured},
		{replyError("ERR Script attempted to access nonexistent global variable 'struct' script: 1f2e, on @user_script:80."), Misconfigured},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), Misconfigured},
		{replyError("THROTTLE-WRONGTYPE throttle:gcra:k: holds a string of 3 bytes, not a state"), Misconfigured},
		{replyError("ERR ratelimit: key ratelimit:{x}:state holds a string, not the limiter state hash script: 24d0, on @user_script:183."), Misconfigured},
		{redis.ErrClosed, Misconfigured},
		{fmt.Errorf("%w: nil pointer", ErrClientPanic), Misconfigured},
		// TLS set up wrong: ours or Redis's certificate, or TLS to a
		// port without it.
		{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, Misconfigured},
		{fmt.Errorf("dial: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "10.0.0.1"}), Misconfigured},
		{x509.CertificateInvalidError{Reason: x509.Expired}, Misconfigured},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, Misconfigured},
		{errors.New("remote error: tls: bad certificate"), Misconfigured},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, Misconfigured},
		{fmt.Errorf("redis: %w", &RefusedHandshake{Err: errors.New("tls: handshake failure")}), Misconfigured},
		// Bugs: replies nothing here expects.
		{replyError("THROTTLE-ERR time 1e300 µs is out of range"), Bug},
		{replyError("ERR ratelimit: unknown op x"), Bug},
		{replyError("ERR redisscript: unsupported pack format <i"), Bug},
		{replyError("ERR Error compiling script (new function): :82: cannot perform add operation between nil and number stack traceback:  :82: in main chunk  [G]: ?"), Bug},
		{replyError("ERR user_script:1: attempt to perform arithmetic on a nil value script: 9a1b, on @user_script:1."), Bug},
		{replyError("ERR something new"), Bug},
		{redis.Nil, Bug},
		// The caller's own context.
		{context.Canceled, Cancelled},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), Cancelled},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestSentinel: an outage is ErrUnavailable, a misconfiguration
// ErrMisconfigured, a bug and a cancelled call neither.
func TestSentinel(t *testing.T) {
	for c, want := range map[Class]error{OK: nil, Outage: ErrUnavailable, Misconfigured: ErrMisconfigured, Bug: nil, Cancelled: nil} {
		if got := Sentinel(c); got != want {
			t.Errorf("Sentinel(%v) = %v, want %v", c, got, want)
		}
	}
}

// probe is a script that reads and writes a key, as the libraries' do.
var probe = New("local v = redis.call('GET', KEYS[1]); redis.call('SET', KEYS[1], packd('<d', 1)); return 1")

// runProbe runs s on c as the libraries do: bounded, EVALSHA then EVAL.
func runProbe(c redis.UniversalClient, s *Script, timeout time.Duration) error {
	_, err := Call(context.Background(), timeout, HonoursDeadlines(c), nil, nil, func(ctx context.Context) (any, error) {
		return s.Run(ctx, c, []string{"k"}, "x").Result()
	})
	return err
}

func newClient(t *testing.T, o *redis.Options) *redis.Client {
	t.Helper()
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
	o.DialerRetries = 1
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestClassifyRedisServer: the classification of what a real redis-server
// answers (or does not) in each condition, through the same runner and
// bound the libraries use.
func TestClassifyRedisServer(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes", "--busy-reply-threshold", "10")
	long := 10 * time.Second // a condition's class must not depend on a slow machine
	check := func(t *testing.T, name string, err error, want Class) {
		t.Helper()
		if got := Classify(err); got != want {
			t.Errorf("%s: %v is %v, want %v", name, err, got, want)
		}
	}
	ok := newClient(t, &redis.Options{Addr: srv.Addr()})

	t.Run("healthy", func(t *testing.T) {
		check(t, "probe", runProbe(ok, probe, long), OK)
	})
	t.Run("DB 99", func(t *testing.T) {
		check(t, "probe", runProbe(newClient(t, &redis.Options{Addr: srv.Addr(), DB: 99}), probe, long), Misconfigured)
	})
	t.Run("cluster client on a single server", func(t *testing.T) {
		// The client redis+cluster://host:port makes (the command's
		// URL, which it turns into redis.ParseClusterURL's form).
		o, err := redis.ParseClusterURL("redis://" + srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		o.MaxRedirects = -1
		c := redis.NewClusterClient(o)
		t.Cleanup(func() { _ = c.Close() })
		check(t, "probe", runProbe(c, probe, long), Misconfigured)
		if !strings.Contains(fmt.Sprint(runProbe(c, probe, long)), "cluster support disabled") {
			t.Errorf("a cluster client on a single server does not say why")
		}
	})
	t.Run("cluster node as a single server", func(t *testing.T) {
		// redis://node of a cluster: the node answers MOVED for the
		// keys of the slots it does not serve, CROSSSLOT for keys of
		// several slots.
		cl := redistest.StartCluster(t, 3)
		var moved, crossslot bool
		for _, node := range cl.Servers {
			c := newClient(t, &redis.Options{Addr: node.Addr()})
			err := runProbe(c, probe, long)
			if err != nil {
				moved = moved || strings.HasPrefix(err.Error(), "MOVED ")
				check(t, "probe on "+node.Addr(), err, Misconfigured)
			}
			_, err = Call(context.Background(), long, HonoursDeadlines(c), nil, nil, func(ctx context.Context) (any, error) {
				return probe.Run(ctx, c, []string{"a", "b"}, "x").Result()
			})
			crossslot = crossslot || strings.HasPrefix(fmt.Sprint(err), "CROSSSLOT ")
			check(t, "two slots on "+node.Addr(), err, Misconfigured)
		}
		if !moved || !crossslot {
			t.Errorf("no node answered MOVED (%v) or CROSSSLOT (%v): the test is not looking", moved, crossslot)
		}
	})
	t.Run("key of another type", func(t *testing.T) {
		srv.CLI("DEL", "k")
		srv.CLI("HSET", "k", "f", "v")
		defer srv.CLI("DEL", "k")
		check(t, "probe", runProbe(ok, probe, long), Misconfigured)
	})
	t.Run("out of memory", func(t *testing.T) {
		// maxmemory reached with noeviction: the server refuses every
		// write (OOM), an outage of the store, whether the script
		// raises it (redis.call) or answers it (pcall).
		oom := redistest.Start(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction")
		c := newClient(t, &redis.Options{Addr: oom.Addr()})
		check(t, "redis.call", runProbe(c, probe, long), Outage)
		check(t, "pcall", runProbe(c, New("local r = redis.pcall('SET', KEYS[1], 'x'); return r"), long), Outage)
	})
	t.Run("script that does not compile", func(t *testing.T) {
		check(t, "probe", runProbe(ok, New("return +"), long), Misconfigured)
	})
	t.Run("script error of ours", func(t *testing.T) {
		check(t, "probe", runProbe(ok, New("return nil + 1"), long), Bug)
	})
	t.Run("no EVALSHA", func(t *testing.T) {
		// A server (or proxy) without EVALSHA: EVAL runs the script.
		s := redistest.Start(t, "--rename-command", "EVALSHA", "")
		check(t, "EVAL fallback", runProbe(newClient(t, &redis.Options{Addr: s.Addr()}), probe, long), OK)
		// Without EVAL either: nothing runs scripts.
		s2 := redistest.Start(t, "--rename-command", "EVALSHA", "", "--rename-command", "EVAL", "")
		check(t, "probe", runProbe(newClient(t, &redis.Options{Addr: s2.Addr()}), probe, long), Misconfigured)
	})
	t.Run("busy script, SCRIPT KILL", func(t *testing.T) {
		// Another client's script loops: the server answers BUSY (past
		// busy-reply-threshold) until SCRIPT KILL stops it, and the
		// killed script's caller gets an error of its own.
		other := newClient(t, &redis.Options{Addr: srv.Addr()})
		var wg sync.WaitGroup
		var loopErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			loopErr = runProbe(other, New("while true do end"), long)
		}()
		deadline := time.Now().Add(long)
		var err error
		for time.Now().Before(deadline) {
			if err = runProbe(ok, probe, long); err != nil {
				break
			}
		}
		check(t, "while busy", err, Outage)
		if !strings.HasPrefix(fmt.Sprint(err), "BUSY") {
			t.Errorf("while busy: %v, want BUSY", err)
		}
		if err := ok.ScriptKill(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		check(t, "killed", loopErr, Outage)
		check(t, "after", runProbe(ok, probe, long), OK)
	})
	t.Run("DEBUG SLEEP", func(t *testing.T) {
		// A server that stalls for a second: a call bounded at 100 ms
		// that runs into the stall is an outage (ErrTimeout).
		sleeper := newClient(t, &redis.Options{Addr: srv.Addr(), ReadTimeout: long})
		done := make(chan error, 1)
		go func() { done <- sleeper.Do(context.Background(), "DEBUG", "SLEEP", "1").Err() }()
		var err error
	loop:
		for {
			if err = runProbe(ok, probe, 100*time.Millisecond); err != nil {
				break
			}
			select {
			case e := <-done: // the stall ended before a call met it
				t.Fatalf("no call met the stall (DEBUG SLEEP: %v)", e)
				break loop
			default:
			}
		}
		check(t, "stalled", err, Outage)
		if !errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("stalled: %v, want ErrTimeout and not the caller's deadline", err)
		}
		if e := <-done; e != nil {
			t.Fatal(e)
		}
	})
	t.Run("kill -STOP", func(t *testing.T) {
		// In a goroutine of its own (a client that reads with its own
		// 3 s timeout) and inline (one that honours deadlines): either
		// way the bound holds.
		for _, ctxTimeout := range []bool{false, true} {
			c := newClient(t, &redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: ctxTimeout})
			if HonoursDeadlines(c) != ctxTimeout {
				t.Fatalf("HonoursDeadlines = %v, want %v", !ctxTimeout, ctxTimeout)
			}
			check(t, "before", runProbe(c, probe, long), OK) // a pooled connection
			srv.Pause()
			start := time.Now()
			err := runProbe(c, probe, 100*time.Millisecond)
			took := time.Since(start)
			srv.Resume()
			check(t, "stopped", err, Outage)
			if !errors.Is(err, ErrTimeout) || took > 2*time.Second {
				t.Errorf("stopped (inline %v): %v after %v, want ErrTimeout after about 100ms", ctxTimeout, err, took)
			}
		}
	})
	t.Run("caller's context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Call(ctx, long, false, nil, nil, func(ctx context.Context) (any, error) {
			return probe.Run(ctx, ok, []string{"k"}, "x").Result()
		})
		check(t, "cancelled", err, Cancelled)
	})
	t.Run("passwords", func(t *testing.T) {
		srv.CLI("CONFIG", "SET", "requirepass", "secret")
		check(t, "no password", runProbe(newClient(t, &redis.Options{Addr: srv.Addr()}), probe, long), Misconfigured)
		check(t, "wrong password", runProbe(newClient(t, &redis.Options{Addr: srv.Addr(), Password: "wrong"}), probe, long), Misconfigured)
		check(t, "right password", runProbe(newClient(t, &redis.Options{Addr: srv.Addr(), Password: "secret"}), probe, long), OK)
	})
	t.Run("down", func(t *testing.T) {
		srv.Kill()
		check(t, "connection refused", runProbe(newClient(t, &redis.Options{Addr: srv.Addr()}), probe, long), Outage)
	})
}

// TestClassifyMiniredis: the same conditions on miniredis, where they can
// be made, and the one only it has: no Lua struct library. (miniredis
// serves any database index, and reports a script's runtime error as a
// compile error with a traceback, which Classify tells apart.)
func TestClassifyMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	long := 10 * time.Second
	ok := newClient(t, &redis.Options{Addr: mr.Addr()})
	for _, tc := range []struct {
		name  string
		c     redis.UniversalClient
		s     *Script
		setup func()
		want  Class
	}{
		{"healthy", ok, probe, nil, OK},
		{"key of another type", ok, probe, func() { mr.HSet("k", "f", "v") }, Misconfigured},
		{"script that does not compile", ok, New("return +"), nil, Misconfigured},
		{"struct used directly", ok, New("return struct.pack('<d', 1)"), nil, Misconfigured},
		{"script error of ours", ok, New("return nil + 1"), nil, Bug},
		{"loading", ok, probe, func() { mr.SetError("LOADING Redis is loading the dataset in memory") }, Outage},
		{"cluster down", ok, probe, func() { mr.SetError("CLUSTERDOWN The cluster is down") }, Outage},
		{"wrong password", newClient(t, &redis.Options{Addr: mr.Addr(), Password: "wrong"}), probe, func() { mr.RequireAuth("secret") }, Misconfigured},
		{"no password", newClient(t, &redis.Options{Addr: mr.Addr()}), probe, func() { mr.RequireAuth("secret") }, Misconfigured},
	} {
		mr.FlushAll()
		mr.SetError("")
		mr.RequireAuth("")
		if tc.setup != nil {
			tc.setup()
		}
		err := runProbe(tc.c, tc.s, long)
		if got := Classify(err); got != tc.want {
			t.Errorf("%s: %v is %v, want %v", tc.name, err, got, tc.want)
		}
	}
	mr.SetError("")
	mr.RequireAuth("")
	addr := mr.Addr()
	mr.Close()
	if err := runProbe(newClient(t, &redis.Options{Addr: addr}), probe, long); Classify(err) != Outage {
		t.Errorf("closed: %v is %v, want outage", err, Classify(err))
	}
}
