package throttle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestRedisKilledUnderLoadFailsFast: Redis killed while calls run, each
// under its caller's deadline (as httplimit's and rls's store timeouts
// bound them), with a client whose retries outlast the deadline. The calls
// that met the dead server wait out their deadline (ErrStore and the
// caller's context.DeadlineExceeded), and the gate closes on them: every
// later call fails at once as an outage (ErrUnavailable and ErrStore).
// Before, the gate stayed open (a deadline said nothing about the server)
// and every call waited out its deadline.
func TestRedisKilledUnderLoadFailsFast(t *testing.T) {
	const (
		deadline    = time.Second
		fast        = 200 * time.Millisecond // generous, well under the deadline
		workers     = 4
		slowAllowed = 2 // per worker: the calls that met the dead server
	)
	srv := redistest.Start(t)
	c := newRedisClient(t, srv.Addr(), redistest.SlowRetries)
	lim := mustNew(t, redisStore(c, WithCallTimeout(time.Minute)), GCRA, PerSecond(1_000_000))
	calls := redistest.KillUnderLoad(t, srv, workers, 12, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		_, err := lim.Allow(ctx, "k")
		return err
	})
	redistest.CheckFast(t, calls, fast, slowAllowed)
	for w, cs := range calls {
		for i, call := range cs {
			if !errors.Is(call.Err, ErrStore) {
				t.Errorf("worker %d, call %d after the kill: %v, want ErrStore", w, i, call.Err)
			}
			if call.Took <= fast && !errors.Is(call.Err, ErrUnavailable) {
				t.Errorf("worker %d, call %d after the kill: %v, want ErrUnavailable", w, i, call.Err)
			}
		}
	}
}
