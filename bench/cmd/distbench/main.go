// Command distbench runs the benchmarks of package distbench (local
// TryAcquire, distributed TryAcquire with permits in hand, redis_rate's
// AllowN, all on one redis-server that the benchmarks start) and prints, as
// Markdown, the medians, the decisions per second per process, the Redis
// load of each, and the ratios against the project's goals. It makes the
// "Distributed" table of docs/performance.md:
//
//	cd bench && go run ./cmd/distbench -count 5
//
// As cmd/ratios does, it compiles the benchmarks once and runs the binary
// count times with -test.count=1, so that each round measures the three
// within seconds of each other and the per-round ratios compare like with
// like on a shared machine. Medians over rounds; ratios are ratios of
// medians, next to the range of the per-round ratios.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	flag.Parse()
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
	if err := run(*count, *benchtime, *raw, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "distbench:", err)
		os.Exit(1)
	}
}

// A round maps "Decision/local" etc. to the benchmark's metrics by unit
// ("ns/op", "evalsha/s", ...).
type round map[string]map[string]float64

// metric makes a report.Metric of one unit of the rounds.
func metric(unit string) report.Metric[round] {
	return func(r round, name string) (float64, bool) {
		x, ok := r[name][unit]
		return x, ok
	}
}

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
}

func run(count int, benchtime, rawPath string, out io.Writer) error {
	if count < 1 {
		return fmt.Errorf("count must be at least 1, got %d", count)
	}
	dir, err := os.MkdirTemp("", "distbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "distbench.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "github.com/smoothrate/ratelimit/bench/distbench")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the benchmarks: %w", err)
	}

	fmt.Fprintf(out, "<!-- %s -->\n\n", report.Machine(redisVersion()))
	loadBefore := report.LoadAvg()
	var rawAll bytes.Buffer
	var rounds []round
	var order []string
	for i := range count {
		cmd := exec.Command(bin, "-test.run", "^$", "-test.bench", ".", "-test.benchmem",
			"-test.benchtime", benchtime, "-test.count", "1")
		cmd.Stderr = os.Stderr
		res, err := cmd.Output()
		rawAll.Write(res)
		if err != nil {
			os.Stderr.Write(res)
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		r, names := parse(res)
		if len(r) == 0 {
			return fmt.Errorf("round %d: no benchmark results", i+1)
		}
		if order == nil {
			order = names
		}
		rounds = append(rounds, r)
		fmt.Fprintf(os.Stderr, "round %d/%d done, load %s\n", i+1, count, report.LoadAvg())
	}
	if rawPath != "" {
		if err := os.WriteFile(rawPath, rawAll.Bytes(), 0o644); err != nil {
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

// benchLine matches "BenchmarkX/y-2   123   45.6 ns/op   7 unit ...".
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func parse(out []byte) (round, []string) {
	r := round{}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		metrics := map[string]float64{}
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				metrics[f[i+1]] = v
			}
		}
		if _, ok := metrics["ns/op"]; !ok {
			continue
		}
		if _, dup := r[m[1]]; !dup {
			names = append(names, m[1])
		}
		r[m[1]] = metrics
	}
	return r, names
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
