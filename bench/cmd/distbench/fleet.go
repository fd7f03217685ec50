package main

// The fleet benchmark (-fleet): N limiters share one name on one
// redis-server at a total demand of twice the rate, and the table says
// what that costs Redis and whether the fleet gets its rate:
//
//	cd bench && go run ./cmd/distbench -fleet 1,16,256,1024
//
// Each limiter is one "process": its own process id, its own goroutine
// calling TryAcquire(1, 0) at 2R/N per second (with a random phase, and
// catching up after an oversleep so that the demand is what it says). The
// limiters share one go-redis client, whose pool holds up to 128
// connections; what Redis does per script is the same as with one client
// per process. After a warm-up, CONFIG RESETSTAT; then, over the measured
// window: lease scripts per second (EVALSHA + EVAL), the server's µs per
// script (INFO commandstats), the commands run inside each script, Redis
// CPU (INFO cpu, user + sys, over the window's wall time) and the permits
// admitted in the window divided by R × window.
//
// A script's server time depends on how often it runs: a call that finds
// the server's caches cold costs several times what the same call costs
// back to back. So after each fleet size, the same server runs
// go-redis/redis_rate's GCRA script (its AllowN) at the lease scripts'
// rate, evenly spaced, for up to 5 s, and the table gives its µs per call
// and the ratio: the same call rate, the same machine, the same minute.
// Then the same for a script that does nothing (return 1): the floor of
// any script call at that rate.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/bench/distbench"
	"github.com/smoothrate/ratelimit/bench/internal/report"
	"github.com/smoothrate/ratelimit/distributed"
)

type fleetConfig struct {
	sizes   []int
	rate    float64
	warm    time.Duration
	measure time.Duration
}

// fleetRow is one line of the table.
type fleetRow struct {
	n                int
	scriptsPerSec    float64
	usPerScript      float64
	cmdsPerScript    float64
	cpu              float64 // Redis CPU seconds per second of the window
	admittedOverRate float64
	redisErrors      int64
	emptyPerLease    float64
	peerUs           float64 // redis_rate's script at the same calls/s
	emptyUs          float64 // return 1 at the same calls/s
}

func parseSizes(s string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("fleet size %q: want a positive integer", f)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

func runFleet(cfg fleetConfig, out io.Writer) error {
	srv, err := distbench.StartServer()
	if err != nil {
		return err
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()

	fmt.Fprintf(out, "<!-- %s -->\n\n", report.Machine(redisVersion()))
	fmt.Fprintf(out, "R = %v/s shared by N limiters on one name, total demand 2R; %v of warm-up, then %v measured per N; load average (1, 5, 15 min) before: %s\n\n",
		cfg.rate, cfg.warm, cfg.measure, report.LoadAvg())
	fmt.Fprintln(out, "| fleet size N | lease scripts/s | µs per script (server) | redis_rate's script at that rate (µs) | ÷ redis_rate | `return 1` at that rate (µs) | Redis commands per script | Redis CPU | admitted / R | empty replies per lease | Redis errors |")
	fmt.Fprintln(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var rows []fleetRow
	for _, n := range cfg.sizes {
		r, err := fleetRun(admin, srv.Addr, n, cfg)
		if err != nil {
			return fmt.Errorf("N = %d: %w", n, err)
		}
		if r.peerUs, r.emptyUs, err = peersAtRate(admin, srv.Addr, r.scriptsPerSec, min(cfg.measure, 5*time.Second)); err != nil {
			return fmt.Errorf("N = %d: %w", n, err)
		}
		rows = append(rows, r)
		fmt.Fprintf(out, "| %d | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f %% | %.3f | %.2f | %d |\n", r.n, report.Num(r.scriptsPerSec),
			r.usPerScript, r.peerUs, r.usPerScript/r.peerUs, r.emptyUs, r.cmdsPerScript, 100*r.cpu, r.admittedOverRate, r.emptyPerLease, r.redisErrors)
	}
	fmt.Fprintf(out, "\nload average after: %s\n\n", report.LoadAvg())
	missed := 0
	for _, r := range rows {
		if r.usPerScript > 30 {
			fmt.Fprintf(out, "* N = %d: %.1f µs per script, goal ≤ 30\n", r.n, r.usPerScript)
			missed++
		}
		if r.admittedOverRate < 0.97 || r.admittedOverRate > 1.03 {
			fmt.Fprintf(out, "* N = %d: admitted / R = %.3f, goal [0.97, 1.03]\n", r.n, r.admittedOverRate)
			missed++
		}
		if r.n >= 1024 && r.cpu > 0.20 {
			fmt.Fprintf(out, "* N = %d: Redis CPU %.1f %%, goal ≤ 20 %%\n", r.n, 100*r.cpu)
			missed++
		}
	}
	if missed == 0 {
		fmt.Fprintln(out, "Every goal met (≤ 30 µs per script, admitted / R in [0.97, 1.03], Redis CPU ≤ 20 % at N ≥ 1024).")
	}
	return nil
}

func fleetRun(admin *redis.Client, addr string, n int, cfg fleetConfig) (fleetRow, error) {
	ctx := context.Background()
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return fleetRow{}, err
	}
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: min(n, 128), ContextTimeoutEnabled: true})
	defer client.Close()
	name := fmt.Sprintf("fleet%d", n)
	lims := make([]*distributed.Limiter, n)
	for i := range lims {
		l, err := distributed.New(client, name, cfg.rate, distributed.WithProcessID(fmt.Sprintf("p%d", i)),
			distributed.WithCallTimeout(time.Second))
		if err != nil {
			return fleetRow{}, err
		}
		lims[i] = l
	}
	perProcess := 2 * cfg.rate / float64(n)
	interval := time.Duration(float64(time.Second) / perProcess)
	runCtx, stop := context.WithCancel(ctx)
	var (
		counting atomic.Bool
		admitted atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	for i, l := range lims {
		wg.Add(1)
		phase := time.Duration(rand.Int64N(int64(interval)))
		go func() {
			defer wg.Done()
			next := start.Add(phase)
			for {
				if d := time.Until(next); d > 0 {
					select {
					case <-runCtx.Done():
						return
					case <-time.After(d):
					}
				}
				if runCtx.Err() != nil {
					return
				}
				// Every attempt that is due, also those an oversleep
				// delayed: the demand stays 2R/N per process.
				for now := time.Now(); !next.After(now); next = next.Add(interval) {
					if l.TryAcquire(1, 0) && counting.Load() {
						admitted.Add(1)
					}
				}
			}
		}()
		_ = i
	}
	time.Sleep(cfg.warm)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		stop()
		return fleetRow{}, err
	}
	cpu0, err := redisCPU(admin)
	if err != nil {
		stop()
		return fleetRow{}, err
	}
	counting.Store(true)
	w0 := time.Now()
	time.Sleep(cfg.measure)
	counting.Store(false)
	window := time.Since(w0).Seconds()
	cpu1, err1 := redisCPU(admin)
	stats, err2 := admin.Info(ctx, "commandstats").Result()
	stop()
	wg.Wait()
	var row fleetRow
	row.n = n
	var leases, empty int64
	for _, l := range lims {
		st := l.Stats()
		row.redisErrors += st.RedisErrors
		leases += st.Leases
		empty += st.EmptyReplies
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = l.Close(cctx)
		cancel()
	}
	if err1 != nil || err2 != nil {
		return fleetRow{}, fmt.Errorf("reading INFO: %v %v", err1, err2)
	}
	scripts, usec, inside := parseCommandStats(stats)
	row.scriptsPerSec = float64(scripts) / window
	if scripts > 0 {
		row.usPerScript = float64(usec) / float64(scripts)
		row.cmdsPerScript = float64(inside) / float64(scripts)
	}
	row.cpu = (cpu1 - cpu0) / window
	row.admittedOverRate = float64(admitted.Load()) / (cfg.rate * window)
	if leases > 0 {
		row.emptyPerLease = float64(empty) / float64(leases)
	}
	return row, nil
}

// peersAtRate runs redis_rate's GCRA script (AllowN on one key), then a
// script that does nothing, each at perSec calls a second for d, and
// returns their server µs per call.
func peersAtRate(admin *redis.Client, addr string, perSec float64, d time.Duration) (peer, empty float64, err error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	rr := redis_rate.NewLimiter(client)
	// 10^6 per second, not 10^9: at 10^9 redis_rate's increment (10^-9 s)
	// vanishes in its float TAT and it skips its SET on every call
	// (bench/distbench's scriptRate), which would make it a read-only
	// script rather than a decision.
	lim := redis_rate.Limit{Rate: 1e6, Burst: 1e6, Period: time.Second}
	peer, err = scriptAtRate(admin, perSec, d, func(ctx context.Context) error {
		_, err := rr.AllowN(ctx, "fleet-peer", lim, 1)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("redis_rate: %w", err)
	}
	empty, err = scriptAtRate(admin, perSec, d, func(ctx context.Context) error {
		return emptyScript.Run(ctx, client, nil).Err()
	})
	if err != nil {
		return 0, 0, fmt.Errorf("return 1: %w", err)
	}
	return peer, empty, nil
}

var emptyScript = redis.NewScript("return 1")

// scriptAtRate makes one call (which loads the script), resets the
// server's statistics, then makes a call every 1/perSec for d, and
// returns the server µs per script call.
func scriptAtRate(admin *redis.Client, perSec float64, d time.Duration, call func(context.Context) error) (float64, error) {
	ctx := context.Background()
	if err := call(ctx); err != nil {
		return 0, err
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return 0, err
	}
	interval := time.Duration(float64(time.Second) / perSec)
	start := time.Now()
	for next := start; time.Since(start) < d; next = next.Add(interval) {
		time.Sleep(time.Until(next))
		if err := call(ctx); err != nil {
			return 0, err
		}
	}
	stats, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	scripts, usec, _ := parseCommandStats(stats)
	if scripts == 0 {
		return 0, fmt.Errorf("no script calls counted")
	}
	return float64(usec) / float64(scripts), nil
}

// redisCPU is the server's user + system CPU time so far, in seconds.
func redisCPU(c *redis.Client) (float64, error) {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			total += x
		}
	}
	return total, nil
}

// parseCommandStats sums INFO commandstats: the script calls (EVALSHA and
// EVAL), their server time in µs, and the commands the scripts ran inside
// (everything else except the benchmark's own CONFIG and INFO).
func parseCommandStats(info string) (scripts, usec, inside int64) {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(k, "cmdstat_") {
			continue
		}
		var calls, us int64
		for _, f := range strings.Split(v, ",") {
			fk, fv, _ := strings.Cut(f, "=")
			switch fk {
			case "calls":
				calls, _ = strconv.ParseInt(fv, 10, 64)
			case "usec":
				us, _ = strconv.ParseInt(fv, 10, 64)
			}
		}
		switch cmd := strings.TrimPrefix(k, "cmdstat_"); {
		case cmd == "evalsha" || cmd == "eval":
			scripts += calls
			usec += us
		case cmd == "config" || cmd == "info" || strings.HasPrefix(cmd, "config|"):
		default:
			inside += calls
		}
	}
	return scripts, usec, inside
}
