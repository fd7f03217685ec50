// Command scriptinstr counts the instructions a redis-server executes per
// decision for throttle.RedisStore's scripts and for go-redis/redis_rate's
// GCRA script, exactly: the server runs under valgrind's callgrind, so the
// count does not depend on the machine's load or speed, and a change to a
// script shows even when it saves 1 % (timed figures, as
// `cmd/distbench -scriptcost`'s, move by more than that on a shared
// machine).
//
//	cd bench && go run ./cmd/scriptinstr            # -n 2000 calls per row
//	cd bench && go run ./cmd/scriptinstr -prefix '' # throttle's keys without "throttle:"
//
// It starts its own redis-server under callgrind on a free loopback port
// (valgrind and redis-server must be on PATH) and drives it with the real
// clients, as a user would: throttle.Limiter.Allow over a RedisStore and
// redis_rate.Limiter.AllowN, one call at a time on one connection. For
// each row it warms the key up (loading the script), zeroes callgrind's
// counters, makes -n calls, all allowed, and dumps the counters: the
// instructions per call are everything the server did for them, reading
// the request, running the script, replying (and its once-a-second timer,
// with --hz 1). It prints a Markdown table with each row's ratio to
// redis_rate's in the same scenario.
//
// Two scenarios, because a Redis script pays for every number it passes
// to redis.call (Redis 7.0 formats it with snprintf "%.17g"):
//
//   - "short": 10^6 per second, so each key is back to full within a
//     microsecond and the TTL is the floor (1 s; throttle sends it as a
//     string). Not 10^9: there redis_rate's increment of
//     10^-9 s vanishes in its float TAT (seconds since 2017, ulp about
//     6·10^-8 s), so it would skip its SET on every call, and the row
//     would compare our script, write included, with its script without
//     one. Every row checks that each call wrote (Redis's count of changes).
//   - "long": 1000 per second with a burst of 10^6, the key first filled
//     with 10 000 (10 s of debt), so every write sets a TTL above the
//     floor.
//
// The other five algorithms run the short scenario too (the sliding log at
// its largest Count per hour), for comparison. Last, the distributed
// limiter's lease script with 1 and with 1 000 processes on one name (see
// lease.go), per lease call, with its ratio to redis_rate's short row: a
// lease does more than a GCRA decision (a registry, a fair share, a
// smooth engine), and this says how much more the server pays for it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/bench/internal/report"
	"github.com/smoothrate/ratelimit/throttle"
)

// row is one measured subject: allow makes one decision, prefill (when
// set) runs once on the key before the warm-up.
type row struct {
	name     string
	scenario string
	allow    func(ctx context.Context, key string) (bool, error)
	prefill  func(ctx context.Context, key string) error
	base     bool // redis_rate: the scenario's reference
}

func rows(c *redis.Client, opts []throttle.StoreOption) ([]row, error) {
	// Under callgrind the server runs many times slower than usual: a
	// call must not be cut off by the store's default bound.
	opts = append(opts[:len(opts):len(opts)], throttle.WithCallTimeout(time.Minute))
	st, err := throttle.NewRedisStore(c, opts...)
	if err != nil {
		return nil, err
	}
	rr := redis_rate.NewLimiter(c)
	throttleRow := func(alg throttle.Algorithm, scenario string, lim throttle.Limit, fill int) (row, error) {
		l, err := throttle.New(st, alg, lim)
		if err != nil {
			return row{}, err
		}
		r := row{name: "throttle " + alg.String(), scenario: scenario, allow: func(ctx context.Context, key string) (bool, error) {
			d, err := l.Allow(ctx, key)
			return d.Allowed, err
		}}
		if fill > 0 {
			r.prefill = func(ctx context.Context, key string) error {
				d, err := l.AllowN(ctx, key, fill)
				if err == nil && !d.Allowed {
					err = fmt.Errorf("prefill of %d refused: %+v", fill, d)
				}
				return err
			}
		}
		return r, nil
	}
	rateRow := func(scenario string, lim redis_rate.Limit, fill int) row {
		r := row{name: "redis_rate", scenario: scenario, base: true, allow: func(ctx context.Context, key string) (bool, error) {
			res, err := rr.AllowN(ctx, key, lim, 1)
			return err == nil && res.Allowed == 1, err
		}}
		if fill > 0 {
			r.prefill = func(ctx context.Context, key string) error {
				res, err := rr.AllowN(ctx, key, lim, fill)
				if err == nil && res.Allowed != fill {
					err = fmt.Errorf("prefill of %d refused: %+v", fill, res)
				}
				return err
			}
		}
		return r
	}
	var out []row
	add := func(r row, err error) error {
		out = append(out, r)
		return err
	}
	short := throttle.Limit{Count: 1e6, Period: time.Second}
	long := throttle.Limit{Count: 1000, Period: time.Second, Burst: 1e6}
	if err := add(throttleRow(throttle.GCRA, "short", short, 0)); err != nil {
		return nil, err
	}
	out = append(out, rateRow("short", redis_rate.Limit{Rate: 1e6, Burst: 1e6, Period: time.Second}, 0))
	if err := add(throttleRow(throttle.GCRA, "long", long, 10_000)); err != nil {
		return nil, err
	}
	out = append(out, rateRow("long", redis_rate.Limit{Rate: 1000, Burst: 1e6, Period: time.Second}, 10_000))
	for _, a := range []throttle.Algorithm{throttle.TokenBucket, throttle.LeakyBucket, throttle.FixedWindow,
		throttle.SlidingWindow, throttle.SlidingLog} {
		lim := short
		if a == throttle.SlidingLog {
			lim = throttle.Limit{Count: throttle.MaxLogCount, Period: time.Hour}
		}
		if err := add(throttleRow(a, "short", lim, 0)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func main() {
	n := flag.Int("n", 2000, "calls per row")
	prefix := flag.String("prefix", throttle.DefaultKeyPrefix, "throttle's key prefix (WithKeyPrefix), to see what its length costs")
	fleets := flag.String("lease", "1,1000", "fleet sizes for the distributed lease rows (empty: none)")
	flag.BoolVar(&keepDumps, "keep", false, "keep callgrind's dumps for callgrind_annotate")
	flag.Parse()
	var sizes []int
	for _, f := range strings.Split(*fleets, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 {
			fmt.Fprintf(os.Stderr, "scriptinstr: -lease %q: want positive fleet sizes\n", *fleets)
			os.Exit(2)
		}
		sizes = append(sizes, k)
	}
	if err := run(*n, *prefix, sizes, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scriptinstr:", err)
		os.Exit(1)
	}
}

func run(n int, prefix string, fleets []int, w io.Writer) error {
	srv, err := startCallgrind()
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer c.Close()
	version, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	rs, err := rows(c, []throttle.StoreOption{throttle.WithKeyPrefix(prefix)})
	if err != nil {
		return err
	}
	per := make([]float64, len(rs))
	for i, r := range rs {
		key := fmt.Sprintf("k%d", i)
		if r.prefill != nil {
			if err := r.prefill(ctx, key); err != nil {
				return fmt.Errorf("%s (%s): %w", r.name, r.scenario, err)
			}
		}
		// Warm up: the script is loaded (EVALSHA falls back to EVAL once)
		// and the key and the connection are in use.
		for range 100 {
			if ok, err := r.allow(ctx, key); err != nil || !ok {
				return fmt.Errorf("%s (%s): warm-up allowed %v, %v", r.name, r.scenario, ok, err)
			}
		}
		before, err := dirty(ctx, c)
		if err != nil {
			return err
		}
		if err := srv.zero(); err != nil {
			return err
		}
		for range n {
			if ok, err := r.allow(ctx, key); err != nil || !ok {
				return fmt.Errorf("%s (%s): allowed %v, %v", r.name, r.scenario, ok, err)
			}
		}
		total, err := srv.dump()
		if err != nil {
			return err
		}
		// Every call must have written its key: a script that skips its
		// write does less than a limiter must (redis_rate at 10^9 per
		// second did: see the scenarios above).
		if after, err := dirty(ctx, c); err != nil {
			return err
		} else if after-before < int64(n) {
			return fmt.Errorf("%s (%s): %d writes in %d calls", r.name, r.scenario, after-before, n)
		}
		per[i] = float64(total) / float64(n)
	}
	leasePer := make([]float64, len(fleets))
	for i, procs := range fleets {
		if leasePer[i], err = leaseInstructions(srv, c, procs, n); err != nil {
			return fmt.Errorf("lease, %d processes: %w", procs, err)
		}
	}
	fmt.Fprintln(w, report.Machine(serverVersion(version), valgrindVersion()))
	fmt.Fprintf(w, "%d calls per row, one at a time on one connection, every call allowed; throttle's key prefix %q; server instructions counted by callgrind\n\n", n, prefix)
	fmt.Fprintln(w, "| script | scenario | server instructions / call | ÷ redis_rate |")
	fmt.Fprintln(w, "|---|---|---:|---:|")
	for i, r := range rs {
		ratio := "—"
		for j, b := range rs {
			if b.base && b.scenario == r.scenario {
				ratio = fmt.Sprintf("%.3f", per[i]/per[j])
			}
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %s |\n", r.name, r.scenario, per[i], ratio)
	}
	for i, procs := range fleets {
		ratio := "—"
		for j, b := range rs {
			if b.base && b.scenario == "short" {
				ratio = fmt.Sprintf("%.3f", leasePer[i]/per[j])
			}
		}
		fmt.Fprintf(w, "| distributed lease | %d processes | %.0f | %s |\n", procs, leasePer[i], ratio)
	}
	return nil
}

// serverVersion picks "redis-server 7.0.15" out of INFO server.
func serverVersion(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis-server " + v
		}
	}
	return "redis-server (unknown version)"
}

func valgrindVersion() string {
	out, err := exec.Command("valgrind", "--version").Output()
	if err != nil {
		return "valgrind (unknown version)"
	}
	return strings.TrimSpace(string(out))
}

// dirty returns the server's count of changes since its last save
// (INFO persistence): each write command adds one.
func dirty(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "rdb_changes_since_last_save:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no rdb_changes_since_last_save in INFO persistence")
}
