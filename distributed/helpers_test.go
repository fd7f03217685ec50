package distributed

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// newClient returns a client for srv that honours context deadlines on the
// socket, as the package documentation recommends.
func newClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  srv.Addr(),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           2 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// skewed is a process's local clock: the shared fake time plus a constant
// offset. Limiters only measure durations on it, so the offset must not
// matter.
type skewed struct {
	base *clocktest.Fake
	off  time.Duration
}

func (s skewed) Now() time.Time { return s.base.Now().Add(s.off) }
func (s skewed) Sleep(ctx context.Context, d time.Duration) error {
	return s.base.Sleep(ctx, d)
}

// redisEpoch is where the explicit Redis time of simulations starts, in µs
// (a realistic Unix time, so that the script works with 16-digit numbers).
const redisEpoch = 1_780_000_000_000_000

// simTime returns the explicit script time for a simulation on base: the
// Redis server's clock, which every process shares.
func simTime(base *clocktest.Fake) func() int64 {
	return func() int64 { return redisEpoch + base.Elapsed().Microseconds() }
}

// withSim makes a limiter part of a deterministic simulation: the script
// runs at the shared fake time and background calls run inline.
func withSim(base *clocktest.Fake) Option {
	return optionFunc(func(c *config) error {
		c.scriptTime = simTime(base)
		c.syncPrefetch = true
		// Simulations measure the protocol, not the machine: a slow
		// round trip on a busy test machine must not look like an
		// outage.
		c.callTimeout = 5 * time.Second
		return nil
	})
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// commandStats reads INFO commandstats of srv, by command name
// ("evalsha", "hgetall", ...).
func commandStats(srv *redistest.Server) map[string]cmdStat {
	stats := map[string]cmdStat{}
	for _, line := range strings.Split(srv.CLI("INFO", "commandstats"), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(v, ",") {
			fk, fv, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseInt(fv, 10, 64)
			switch fk {
			case "calls":
				st.calls = x
			case "usec":
				st.usec = x
			}
		}
		stats[strings.TrimPrefix(k, "cmdstat_")] = st
	}
	return stats
}
