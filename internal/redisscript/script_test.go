package redisscript

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// cmdLog counts commands by name and can rewrite error replies, as a
// proxy in front of Redis might.
type cmdLog struct {
	mu      sync.Mutex
	calls   map[string]int
	rewrite func(err error) error
}

func (l *cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		l.calls[cmd.Name()]++
		rw := l.rewrite
		l.mu.Unlock()
		err := next(ctx, cmd)
		if err != nil && rw != nil {
			err = rw(err)
			cmd.SetErr(err)
		}
		return err
	}
}

func (l *cmdLog) take() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = map[string]int{}
	return c
}

// TestRunFallback: Run sends EVALSHA, and EVAL once when the reply may
// mean the server lacks the script (NOSCRIPT, or a proxy's rewrite of it);
// after a reply that cannot mean that (a key of another type, a server
// that is loading, the script's own error) it does not send the source.
func TestRunFallback(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	log := &cmdLog{calls: map[string]int{}}
	c.AddHook(log)
	ctx := context.Background()
	run := func() error { return probe.Run(ctx, c, []string{"k"}, "x").Err() }

	if err := run(); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); got["evalsha"] != 1 || got["eval"] != 1 {
		t.Fatalf("first run: %v, want EVALSHA then EVAL", got)
	}
	if err := run(); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); got["evalsha"] != 1 || got["eval"] != 0 {
		t.Fatalf("loaded: %v, want EVALSHA only", got)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	log.take()
	log.rewrite = func(err error) error {
		if strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return replyError("ERR proxy: unknown script")
		}
		return err
	}
	if err := run(); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); got["evalsha"] != 1 || got["eval"] != 1 {
		t.Fatalf("behind a proxy: %v, want EVALSHA then EVAL", got)
	}
	log.rewrite = nil

	for _, tc := range []struct {
		name  string
		setup func()
		s     *Script
	}{
		{"key of another type", func() { mr.HSet("k", "f", "v") }, probe},
		{"loading", func() { mr.SetError("LOADING Redis is loading the dataset in memory") }, probe},
		{"the script's own error", nil, New("return redis.error_reply('THROTTLE-ERR no')")},
	} {
		mr.FlushAll()
		if tc.setup != nil {
			tc.setup()
		}
		_ = tc.s.Run(ctx, c, []string{"k"}, "x").Err() // loads it, if it can
		log.take()
		err := tc.s.Run(ctx, c, []string{"k"}, "x").Err()
		mr.SetError("")
		if err == nil {
			t.Fatalf("%s: no error", tc.name)
		}
		if got := log.take(); got["eval"] != 0 {
			t.Errorf("%s: %v after %v, want no EVAL", tc.name, got, err)
		}
	}
}

// A plain script is its body alone, runs with EVALSHA once loaded, and has
// another hash than the same body after the Prelude.
func TestNewPlain(t *testing.T) {
	body := "return redis.call('INCRBY', KEYS[1], ARGV[1])"
	s := NewPlain(body)
	if s.Source() != body {
		t.Fatalf("source %q, want the body alone", s.Source())
	}
	if s.Hash() == New(body).Hash() {
		t.Fatal("a plain script has the hash of the same body after the Prelude")
	}
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	for want := int64(2); want <= 4; want += 2 {
		n, err := s.Run(context.Background(), c, []string{"k"}, 2).Int64()
		if err != nil || n != want {
			t.Fatalf("run: %d, %v; want %d", n, err, want)
		}
	}
}
