// Command distbench runs the benchmarks of package distbench (local
// TryAcquire, distributed TryAcquire with permits in hand, redis_rate's
// AllowN, all on one redis-server that the benchmarks start) and prints, as
// Markdown, the medians, the decisions per second per process, the Redis
// load of each, and the ratios against the project's goals. It makes the
// "Distributed" table of docs/performance.md:
//
//	cd bench && go run ./cmd/distbench -count 5
//
// With -bench Keyed it runs instead the keyed-limiter benchmarks
// (throttle.RedisStore against go-redis/redis_rate on the same server and
// client pool) and prints their table and the project's goals for them:
//
//	cd bench && go run ./cmd/distbench -count 5 -bench Keyed
//
// With -scriptcost N it measures instead each throttle script's server
// time against redis_rate's, alternating them (see scriptcost.go):
//
//	cd bench && go run ./cmd/distbench -scriptcost 20000 -count 7
//
// As cmd/ratios does, it compiles the benchmarks once and runs the binary
// count times with -test.count=1, so that each round measures the three
// within seconds of each other and the per-round ratios compare like with
// like on a shared machine. Medians over rounds; ratios are ratios of
// medians, next to the range of the per-round ratios.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/smoothrate/ratelimit/bench/internal/report"
)

func main() {
	count := flag.Int("count", 5, "rounds: the benchmarks run this many times, each with -test.count=1")
	benchtime := flag.String("benchtime", "1s", "-test.benchtime of each run")
	raw := flag.String("raw", "", "also write the raw benchmark output to this file (benchstat format)")
	fleet := flag.String("fleet", "", "instead: the fleet benchmark for these fleet sizes, e.g. 1,16,256,1024 (see fleet.go)")
	rate := flag.Float64("rate", 1000, "-fleet: the shared rate R")
	warm := flag.Duration("warm", 3*time.Second, "-fleet: warm-up before each measurement")
	measure := flag.Duration("measure", 10*time.Second, "-fleet: measured window per fleet size")
	bench := flag.String("bench", "^BenchmarkDecision", "-test.bench of each run: ^BenchmarkDecision (the distributed table) or Keyed (the keyed Redis table)")
	scriptcost := flag.Int("scriptcost", 0, "instead: the script-cost measurement, this many calls per subject and round (see scriptcost.go)")
	callers := flag.Int("callers", 1, "-scriptcost: concurrent callers")
	flag.Parse()
	if *scriptcost > 0 {
		if err := runScriptCost(*scriptcost, *count, max(1, *callers), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "distbench:", err)
			os.Exit(1)
		}
		return
	}
	if *fleet != "" {
		sizes, err := parseSizes(*fleet)
		if err == nil {
			err = runFleet(fleetConfig{sizes: sizes, rate: *rate, warm: *warm, measure: *measure}, os.Stdout)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "distbench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*count, *benchtime, *bench, *raw, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "distbench:", err)
		os.Exit(1)
	}
}

// metric makes a report.Metric of one unit of the rounds.
func metric(unit string) report.Metric[report.Round] { return report.Unit(unit) }

// goal: num/den of a metric's medians compared with a bound.
type goal struct {
	what       string
	num, den   string
	metric     string
	bound      float64
	atMost     bool
	boundLabel string
}

var goals = []goal{
	{"distributed / local, ns/op", "Decision/distributed", "Decision/local", "ns/op", 2, true, "≤ 2"},
	{"distributed / redis_rate, decisions/s", "Decision/redis_rate", "Decision/distributed", "ns/op", 100, false, "≥ 100"},
	{"parallel: distributed / local, ns/op", "DecisionParallel/distributed", "DecisionParallel/local", "ns/op", 0, true, ""},
	{"parallel: distributed / redis_rate, decisions/s", "DecisionParallel/redis_rate", "DecisionParallel/distributed", "ns/op", 0, false, ""},
	// The keyed RedisStore against redis_rate: no more Redis time per
	// decision, and at least as many decisions per second.
	{"throttle GCRA / redis_rate, server µs per call", "KeyedRedis/throttle-gcra", "KeyedRedis/redis_rate", "evalsha-µs/call", 1, true, "≤ 1"},
	{"throttle GCRA / redis_rate, decisions/s", "KeyedRedis/redis_rate", "KeyedRedis/throttle-gcra", "ns/op", 1, false, "≥ 1"},
	{"parallel: throttle GCRA / redis_rate, server µs per call", "KeyedRedisParallel/throttle-gcra", "KeyedRedisParallel/redis_rate", "evalsha-µs/call", 1, true, "≤ 1"},
	{"parallel: throttle GCRA / redis_rate, decisions/s", "KeyedRedisParallel/redis_rate", "KeyedRedisParallel/throttle-gcra", "ns/op", 1, false, "≥ 1"},
}

func run(count int, benchtime, bench, rawPath string, out io.Writer) error {
	fmt.Fprintf(out, "<!-- %s -->\n\n", report.Machine(redisVersion()))
	loadBefore := report.LoadAvg()
	rounds, order, raw, err := report.RunRounds(report.Job{Pkg: "github.com/smoothrate/ratelimit/bench/distbench",
		Count: count, Benchtime: benchtime, Bench: bench})
	if err != nil {
		return err
	}
	if rawPath != "" {
		if err := os.WriteFile(rawPath, raw, 0o644); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "%d rounds of -benchtime=%s, one process, one redis-server on loopback started by the benchmarks; load average (1, 5, 15 min) before: %s, after: %s\n\n",
		count, benchtime, loadBefore, report.LoadAvg())
	fmt.Fprintln(out, "| Benchmark | median ns/op | min | max | decisions/s per process | scripts/s (EVALSHA) | Redis commands/s (incl. inside scripts) | EVALSHA µs/call (server) | waited for Redis /op | refused /op | B/op | allocs/op |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, name := range order {
		ns := report.Column(rounds, metric("ns/op"), name)
		cell := func(unit string, f func(float64) string) string {
			v := report.Column(rounds, metric(unit), name)
			if len(v) == 0 {
				return "–"
			}
			return f(report.Median(v))
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name,
			report.Num(report.Median(ns)), report.Num(slices.Min(ns)), report.Num(slices.Max(ns)),
			sci(1e9/report.Median(ns)),
			cell("evalsha/s", report.Num), cell("redis-cmds/s", report.Num), cell("evalsha-µs/call", report.Num),
			cell("remote/op", report.Num), cell("refused/op", frac), cell("B/op", report.Num), cell("allocs/op", report.Num))
	}

	fmt.Fprintln(out)
	fmt.Fprintln(out, "| Ratio | of medians | per-round range | goal | met |")
	fmt.Fprintln(out, "|---|---:|---:|---:|:---:|")
	failed := 0
	for _, g := range goals {
		r, lo, hi, ok := report.Ratio(rounds, metric(g.metric), g.num, g.den)
		if !ok {
			continue
		}
		met := ""
		if g.boundLabel != "" {
			met = "yes"
			if g.atMost && r > g.bound || !g.atMost && r < g.bound {
				met, failed = "**no**", failed+1
			}
		}
		fmt.Fprintf(out, "| %s | %s | %s–%s | %s | %s |\n", g.what, report.Num(r), report.Num(lo), report.Num(hi), g.boundLabel, met)
	}
	if failed > 0 {
		fmt.Fprintf(out, "\n%d goal(s) missed.\n", failed)
	}
	return nil
}

// frac prints a small fraction so that a non-zero one never reads as 0.
func frac(x float64) string {
	if x == 0 {
		return "0"
	}
	return strconv.FormatFloat(x, 'g', 2, 64)
}

// sci prints a rate with three significant digits: 1.85e7, 2.2e4.
func sci(x float64) string { return strconv.FormatFloat(x, 'g', 3, 64) }

// redisVersion goes into the machine note: the Redis figures depend on it.
func redisVersion() string {
	if b, err := exec.Command("redis-server", "--version").Output(); err == nil {
		return strings.TrimSpace(string(b))
	}
	return "redis-server not found"
}
