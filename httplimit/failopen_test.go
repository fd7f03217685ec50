package httplimit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/throttle"
)

// TestFailOpenOnlyOnOutage: WithFailOpen passes requests when Redis is
// out (refused connections, a server that does not answer within
// WithStoreTimeout), never when it answers but is set up wrong (a wrong
// password, a replica's address: READONLY): that gets 503 as without
// WithFailOpen.
func TestFailOpenOnlyOnOutage(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireAuth("right")
	down, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = down.Close() })
	closed := miniredis.RunT(t)
	closedAddr := closed.Addr()
	closed.Close()
	replica := redistest.StartReplica(t, redistest.Start(t))

	for _, tc := range []struct {
		name, addr, password string
		code                 int
		want                 error
	}{
		{"wrong password", mr.Addr(), "wrong", 503, throttle.ErrMisconfigured},
		{"no password", mr.Addr(), "", 503, throttle.ErrMisconfigured},
		{"a replica", replica.Addr(), "", 503, throttle.ErrMisconfigured},
		{"connection refused", closedAddr, "", 200, throttle.ErrUnavailable},
		{"no answer within the store timeout", down.Addr().String(), "", 200, throttle.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: tc.addr, Password: tc.password, MaxRetries: -1})
			t.Cleanup(func() { _ = client.Close() })
			store, err := throttle.NewRedisStore(client, throttle.WithCallTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var hooked error
			h, backend := handler(t, newLimiterOn(t, store, throttle.GCRA, throttle.PerMinute(3)),
				WithFailOpen(), WithStoreTimeout(100*time.Millisecond),
				WithErrorHook(func(_ *http.Request, err error) { hooked = err }))
			w := do(h, "192.0.2.1:1", "/")
			if w.Code != tc.code || backend.calls.Load() != int64(tc.code/200%2) {
				t.Errorf("%d, backend called %d times; want %d", w.Code, backend.calls.Load(), tc.code)
			}
			if !errors.Is(hooked, tc.want) || !errors.Is(hooked, throttle.ErrStore) {
				t.Errorf("hook got %v, want %v", hooked, tc.want)
			}
		})
	}
}

// TestClientGoneIsNoStoreError: a request whose context ended before or
// during its decision (the client went away) is not a store failure: the
// error hook hears nothing (the proxy counted it in its store errors and
// logged an outage's start), with one limit or several, on the memory
// store or Redis, WithFailOpen or not.
func TestClientGoneIsNoStoreError(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	redisStore, err := throttle.NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range map[string]throttle.Store{"memory": memStore(), "redis": redisStore} {
		for _, limits := range []int{1, 2} {
			var hooked error
			opts := []Option{WithFailOpen(), WithErrorHook(func(_ *http.Request, err error) { hooked = err })}
			if limits == 2 {
				opts = append(opts, WithLimit("route", newLimiterOn(t, store, throttle.GCRA, throttle.PerMinute(3)), IP(), Route()))
			}
			h, backend := handler(t, newLimiterOn(t, store, throttle.GCRA, throttle.PerMinute(3)), opts...)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
			r.RemoteAddr = "192.0.2.1:1"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if hooked != nil || w.Code == http.StatusServiceUnavailable && backend.calls.Load() != 0 {
				t.Errorf("%s, %d limits, the client gone: %d, backend called %d times, the hook got %v", name, limits, w.Code, backend.calls.Load(), hooked)
			}
		}
	}
}
