package throttle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// callLog is a go-redis hook that counts commands by name and can rewrite
// their errors, as a proxy in front of Redis might.
type callLog struct {
	mu      sync.Mutex
	calls   map[string]int
	rewrite func(cmd redis.Cmder, err error) error
	before  func(cmd redis.Cmder)
}

func newCallLog() *callLog { return &callLog{calls: map[string]int{}} }

func (l *callLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *callLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		l.calls[cmd.Name()]++
		before, rewrite := l.before, l.rewrite
		l.mu.Unlock()
		if before != nil {
			before(cmd)
		}
		err := next(ctx, cmd)
		if rewrite != nil && err != nil {
			err = rewrite(cmd, err)
			cmd.SetErr(err)
		}
		return err
	}
}

func (l *callLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// count returns how many commands named name (lower case) ran.
func (l *callLog) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[name]
}

func (l *callLog) reset() {
	l.mu.Lock()
	l.calls = map[string]int{}
	l.mu.Unlock()
}

// replyError is an error reply as go-redis reports one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestRedisScriptReload(t *testing.T) {
	f := redisFor(t)
	ctx := context.Background()
	log := newCallLog()
	c := newRedisClient(t, f.srv.Addr())
	c.AddHook(log)
	lim := mustNew(t, redisStore(c, WithStoreClock(newSetClock())), GCRA, PerMinute(10))

	mustAllow(t, lim, "k", 1) // loads the script
	f.srv.CLI("SCRIPT", "FLUSH")
	log.reset()
	if d := mustAllow(t, lim, "k", 1); !d.Allowed || d.Remaining != 8 {
		t.Fatalf("after SCRIPT FLUSH: %+v", d)
	}
	if log.count("evalsha") != 1 || log.count("eval") != 1 {
		t.Fatalf("after SCRIPT FLUSH: %v, want one EVALSHA then one EVAL", log.calls)
	}

	// A proxy that rewrites NOSCRIPT (go-redis/redis_rate #88): any error
	// reply that is not the script's own is retried with EVAL, once.
	log.rewrite = func(cmd redis.Cmder, err error) error {
		if strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return replyError("ERR proxy: unknown script")
		}
		return err
	}
	f.srv.CLI("SCRIPT", "FLUSH")
	log.reset()
	if d := mustAllow(t, lim, "k", 1); !d.Allowed || d.Remaining != 7 {
		t.Fatalf("behind a proxy: %+v", d)
	}
	if log.count("evalsha") != 1 || log.count("eval") != 1 {
		t.Fatalf("behind a proxy: %v, want one EVALSHA then one EVAL", log.calls)
	}

	// The script's own errors are final: no EVAL.
	f.client.Set(ctx, "throttle:gcra:str", "x", 0)
	log.reset()
	if _, err := lim.Allow(ctx, "str"); !errors.Is(err, ErrWrongType) || !errors.Is(err, ErrMisconfigured) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("wrong type: %v, want ErrWrongType and ErrMisconfigured", err)
	}
	if log.count("eval") != 0 {
		t.Fatalf("wrong type: %v, want no EVAL", log.calls)
	}
}

// TestRedisRestart kills the server mid-run. While it is down every call
// fails with an error wrapping ErrStore and the zero Decision (refused),
// and nothing panics; once it is back (empty: persistence is off) the
// scripts are loaded again and decisions resume from full allowance: the
// state lived in Redis only and is lost.
//
// go-redis stops dialing after PoolSize failed dials in a row and returns
// the last dial error until a background probe, once a second, finds the
// server back: with 18 failed calls and GOMAXPROCS 1 (a PoolSize of 10),
// the first calls after the restart would fail for up to a second. The
// store's gate (redisscript.Gate) dials itself while the server is down,
// so the client's pool sees at most the first failure and the first call
// after the restart goes through, whatever the PoolSize.
func TestRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	c := newRedisClient(t, srv.Addr(), func(o *redis.Options) { o.PoolSize = 2 })
	ctx := context.Background()
	clk := newSetClock()
	s := redisStore(c, WithStoreClock(clk))
	for _, alg := range allAlgorithms {
		lim := mustNew(t, s, alg, PerMinute(5))
		for range 5 {
			mustAllow(t, lim, alg.String(), 1)
		}
		if d := mustAllow(t, lim, alg.String(), 1); d.Allowed {
			t.Fatalf("%v: 6th of 5 allowed", alg)
		}
	}
	srv.Kill()
	for _, alg := range allAlgorithms {
		lim := mustNew(t, s, alg, PerMinute(5))
		d, err := lim.Allow(ctx, alg.String())
		if !errors.Is(err, ErrStore) || !errors.Is(err, ErrUnavailable) || d != (Decision{}) {
			t.Fatalf("%v while down: %+v, %v; want the zero Decision and ErrUnavailable", alg, d, err)
		}
		if err := lim.Reset(ctx, alg.String()); !errors.Is(err, ErrStore) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%v: Reset while down: %v", alg, err)
		}
		if _, err := AllowAll(ctx, Check{Limiter: lim, Key: "a", N: 1}); !errors.Is(err, ErrStore) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%v: AllowAll while down: %v", alg, err)
		}
	}
	srv.Restart()
	clk.Add(time.Second) // well within the minute: only the restart frees the keys
	for _, alg := range allAlgorithms {
		lim := mustNew(t, s, alg, PerMinute(5))
		d := mustAllow(t, lim, alg.String(), 1)
		if !d.Allowed || d.Remaining != 4 {
			t.Fatalf("%v after restart: %+v; want a fresh key", alg, d)
		}
	}
}

func TestRedisContextCancelled(t *testing.T) {
	f := redisFor(t)
	lim := mustNew(t, redisStore(f.client), GCRA, PerSecond(1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := lim.Allow(ctx, "k")
	if !errors.Is(err, ErrStore) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrMisconfigured) {
		t.Fatalf("err = %v, want ErrStore and context.Canceled, neither outage nor misconfiguration", err)
	}
}
