package main

// The script-cost measurement (-scriptcost N): what one decision costs the
// server, throttle.RedisStore's script of each algorithm against
// go-redis/redis_rate's GCRA script, measured so that a change to a script
// shows within a minute on a shared machine:
//
//	cd bench && go run ./cmd/distbench -scriptcost 20000 -count 7
//	cd bench && go run ./cmd/distbench -scriptcost 40000 -count 7 -callers 8
//
// One redis-server, one client. Each round runs every subject in turn (so
// the subjects alternate and see the same machine load): CONFIG RESETSTAT,
// N allowed calls on one key by -callers goroutines (default 1: serial;
// with more, the server is never idle between calls, which steadies its
// figures on a shared machine), then the scripts' server µs per call
// from INFO commandstats and the calls per second seen by the client. It
// prints the median of each over the rounds, and each subject's ratio to
// redis_rate: the ratio of medians and the range of the per-round ratios.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/bench/distbench"
	"github.com/smoothrate/ratelimit/bench/internal/report"
	"github.com/smoothrate/ratelimit/throttle"
)

// costSubject is one script under measurement: allow makes one decision.
type costSubject struct {
	name  string
	allow func(ctx context.Context, key string) (bool, error)
}

func costSubjects(c *redis.Client) ([]costSubject, error) {
	st, err := throttle.NewRedisStore(c)
	if err != nil {
		return nil, err
	}
	var out []costSubject
	for _, a := range []throttle.Algorithm{throttle.GCRA, throttle.TokenBucket, throttle.LeakyBucket,
		throttle.FixedWindow, throttle.SlidingWindow, throttle.SlidingLog} {
		// Every call allowed; the sliding log's Count is its maximum, so
		// that a round's N entries fit in one hour.
		lim := throttle.Limit{Count: 1e6, Period: time.Second}
		if a == throttle.SlidingLog {
			lim = throttle.Limit{Count: throttle.MaxLogCount, Period: time.Hour}
		}
		l, err := throttle.New(st, a, lim)
		if err != nil {
			return nil, err
		}
		out = append(out, costSubject{"throttle-" + a.String(), func(ctx context.Context, key string) (bool, error) {
			d, err := l.Allow(ctx, key)
			return d.Allowed, err
		}})
	}
	rr := redis_rate.NewLimiter(c)
	// 10^6 per second, not 10^9: at 10^9 redis_rate's increment (10^-9 s)
	// vanishes in its float TAT and it skips its SET on every call
	// (bench/distbench's scriptRate).
	rl := redis_rate.Limit{Rate: 1e6, Burst: 1e6, Period: time.Second}
	out = append(out, costSubject{"redis_rate", func(ctx context.Context, key string) (bool, error) {
		res, err := rr.AllowN(ctx, key, rl, 1)
		return err == nil && res.Allowed == 1, err
	}})
	return out, nil
}

// scriptUsec is the scripts' (EVALSHA and EVAL) server µs per call and
// their calls, from INFO commandstats.
func scriptUsec(ctx context.Context, c *redis.Client) (float64, int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	scripts, usec, _ := parseCommandStats(info)
	if scripts == 0 {
		return 0, 0, fmt.Errorf("no script calls in INFO commandstats")
	}
	return float64(usec) / float64(scripts), scripts, nil
}

func runScriptCost(n, rounds, callers int, w io.Writer) error {
	srv, err := distbench.StartServer()
	if err != nil {
		return err
	}
	defer srv.Stop()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	subs, err := costSubjects(c)
	if err != nil {
		return err
	}
	usec := make([][]float64, len(subs))
	rate := make([][]float64, len(subs))
	for r := range rounds {
		for i, s := range subs {
			key := fmt.Sprintf("scriptcost-%d-%d-%d", os.Getpid(), r, i)
			if ok, err := s.allow(ctx, key); err != nil || !ok { // loads the script
				return fmt.Errorf("%s: allowed %v, %v", s.name, ok, err)
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				return err
			}
			start := time.Now()
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for w := range callers {
				wg.Go(func() {
					for range n/callers + btoi(w < n%callers) {
						if ok, err := s.allow(ctx, key); err != nil || !ok {
							errs[w] = fmt.Errorf("%s: allowed %v, %v", s.name, ok, err)
							return
						}
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return err
			}
			secs := time.Since(start).Seconds()
			u, calls, err := scriptUsec(ctx, c)
			if err != nil {
				return err
			}
			if calls != int64(n) {
				return fmt.Errorf("%s: %d script calls for %d decisions", s.name, calls, n)
			}
			usec[i] = append(usec[i], u)
			rate[i] = append(rate[i], float64(n)/secs)
		}
	}
	base := len(subs) - 1 // redis_rate
	fmt.Fprintln(w, report.Machine())
	fmt.Fprintf(w, "%d rounds of %d calls per subject by %d callers, subjects alternating; medians (per-round ratio range)\n\n", rounds, n, callers)
	fmt.Fprintln(w, "| script | server µs/call | ÷ redis_rate | decisions/s | ÷ redis_rate |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for i, s := range subs {
		fmt.Fprintf(w, "| %s | %.2f | %s | %.0f | %s |\n", s.name, report.Median(usec[i]), ratioCell(usec[i], usec[base]),
			report.Median(rate[i]), ratioCell(rate[i], rate[base]))
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ratioCell is report.Median(a)/report.Median(b) and the range of a[r]/b[r].
func ratioCell(a, b []float64) string {
	rs := make([]float64, len(a))
	for r := range a {
		rs[r] = a[r] / b[r]
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", report.Median(a)/report.Median(b), slices.Min(rs), slices.Max(rs))
}
