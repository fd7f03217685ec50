// Command ratios runs the hot-path benchmarks of package bench and prints,
// as Markdown, the median ns/op, B/op and allocs/op of each, and the ratios
// of this module's limiter to its peers against the project's goals. It is
// how the tables in docs/performance.md are made:
//
//	cd bench && go run ./cmd/ratios -count 7 -raw /tmp/bench_raw.txt
//
// With -dir it runs another package's benchmarks the same way, for the
// tables of the limiter's and the engine's own benchmarks:
//
//	go run ./cmd/ratios -count 7 -dir ..          # package ratelimit
//	go run ./cmd/ratios -count 7 -dir ../smooth   # the engine
//
// It compiles the benchmarks once and runs the binary count times with
// -test.count=1, so that each round measures every library within a few
// seconds of the others: on a shared machine a change of load then shifts a
// whole round, not one library, and the per-round ratios stay comparable.
// The table reports the median over rounds; the ratio column is the ratio of
// the medians, next to the range of the per-round ratios.
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

	"github.com/smoothrate/ratelimit/bench/internal/report"
)

// goal is one acceptance criterion: ours/peer median ns/op <= max.
type goal struct {
	ours, peer string
	max        float64
}

// The granted goals are issue 10's (tighter than issue 2's 0.6 and 0.9),
// and in parallel at GOMAXPROCS 2 ours must be no slower than uber's
// lock-free Take.
var goals = []goal{
	{"Granted/ours", "Granted/xrate", 0.55},
	{"Granted/ours", "Granted/uber", 0.85},
	{"Denied/ours", "Denied/xrate", 0.4},
	{"GrantedParallel/ours", "GrantedParallel/xrate", 0.9},
	{"GrantedParallel/ours", "GrantedParallel/uber", 1.0},
	{"DeniedParallel/ours", "DeniedParallel/xrate", 0.9},
}

// extra are ratios shown without a goal.
var extra = [][2]string{
	{"Granted/ours", "Granted/juju"},
	{"GrantedParallel/ours", "GrantedParallel/juju"},
	{"Denied/ours", "Denied/juju"},
	{"Reserve/ours", "Reserve/xrate"},
	{"ReserveParallel/ours", "ReserveParallel/xrate"},
	{"BlockingNoWait/ours", "BlockingNoWait/xrate"},
	{"BlockingNoWait/ours", "BlockingNoWait/juju"},
}

type sample struct{ ns, bytes, allocs float64 }

// field makes a report.Metric of one figure of the samples in a round.
func field(f func(sample) float64) report.Metric[map[string]sample] {
	return func(r map[string]sample, name string) (float64, bool) {
		s, ok := r[name]
		return f(s), ok
	}
}

var (
	nsOf     = field(func(s sample) float64 { return s.ns })
	bytesOf  = field(func(s sample) float64 { return s.bytes })
	allocsOf = field(func(s sample) float64 { return s.allocs })
)

func main() {
	count := flag.Int("count", 5, "rounds: the benchmarks run this many times, each with -test.count=1")
	benchtime := flag.String("benchtime", "200ms", "-test.benchtime of each run")
	bench := flag.String("bench", ".", "-test.bench pattern")
	cpu := flag.String("cpu", "", "-test.cpu list (empty: GOMAXPROCS)")
	raw := flag.String("raw", "", "also write the raw benchmark output to this file (benchstat format)")
	dir := flag.String("dir", "", "benchmark the package in this directory instead of package bench (e.g. .. or ../smooth)")
	flag.Parse()
	if err := run(*count, *benchtime, *bench, *cpu, *raw, *dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ratios:", err)
		os.Exit(1)
	}
}

func run(count int, benchtime, bench, cpu, rawPath, pkgDir string, out io.Writer) error {
	if count < 1 {
		return fmt.Errorf("count must be at least 1, got %d", count)
	}
	dir, err := os.MkdirTemp("", "ratios")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bench.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "github.com/smoothrate/ratelimit/bench")
	if pkgDir != "" {
		build = exec.Command("go", "test", "-c", "-o", bin, ".")
		build.Dir = pkgDir
	}
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the benchmarks: %w", err)
	}

	fmt.Fprintf(out, "<!-- %s -->\n\n", report.Machine())
	loadBefore := report.LoadAvg()
	var rawAll bytes.Buffer
	rounds := make([]map[string]sample, 0, count)
	var order []string
	for i := range count {
		args := []string{"-test.run", "^$", "-test.bench", bench, "-test.benchmem",
			"-test.benchtime", benchtime, "-test.count", "1"}
		if cpu != "" {
			args = append(args, "-test.cpu", cpu)
		}
		cmd := exec.Command(bin, args...)
		cmd.Stderr = os.Stderr
		res, err := cmd.Output()
		rawAll.Write(res)
		if err != nil {
			os.Stdout.Write(res)
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		r, names, err := parse(res, cpu != "")
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
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

	fmt.Fprintf(out, "%d rounds of -benchtime=%s; load average (1, 5, 15 min) before: %s, after: %s\n\n",
		count, benchtime, loadBefore, report.LoadAvg())
	fmt.Fprintln(out, "| Benchmark | median ns/op | min | max | B/op | allocs/op |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for _, name := range order {
		ns := report.Column(rounds, nsOf, name)
		b := report.Column(rounds, bytesOf, name)
		a := report.Column(rounds, allocsOf, name)
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", name,
			report.Num(report.Median(ns)), report.Num(slices.Min(ns)), report.Num(slices.Max(ns)), report.Num(report.Median(b)), report.Num(report.Median(a)))
	}

	var rows []string
	failed := 0
	for _, g := range goals {
		r, lo, hi, ok := report.Ratio(rounds, nsOf, g.ours, g.peer)
		if !ok {
			continue
		}
		met := "yes"
		if r > g.max {
			met, failed = "**no**", failed+1
		}
		rows = append(rows, fmt.Sprintf("| %s / %s | %.2f | %.2f–%.2f | ≤ %.1f | %s |", g.ours, g.peer, r, lo, hi, g.max, met))
	}
	for _, e := range extra {
		if r, lo, hi, ok := report.Ratio(rounds, nsOf, e[0], e[1]); ok {
			rows = append(rows, fmt.Sprintf("| %s / %s | %.2f | %.2f–%.2f | | |", e[0], e[1], r, lo, hi))
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "| Ratio (ns/op) | of medians | per-round range | goal | met |")
		fmt.Fprintln(out, "|---|---:|---:|---:|:---:|")
		for _, r := range rows {
			fmt.Fprintln(out, r)
		}
	}
	if failed > 0 {
		fmt.Fprintf(out, "\n%d goal(s) missed.\n", failed)
	}
	return nil
}

// benchLine matches "BenchmarkX/y-2   123   45.6 ns/op   0 B/op   0 allocs/op".
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-(\d+))?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op\s+([\d.]+) allocs/op)?`)

// parse reads benchmark lines. The -N suffix (GOMAXPROCS, absent for 1) is
// dropped, unless keepProcs (a -cpu list, where it tells runs apart), in
// which case names become "X (cpu=N)".
func parse(out []byte, keepProcs bool) (map[string]sample, []string, error) {
	res := map[string]sample{}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name := m[1]
		if keepProcs {
			procs := m[2]
			if procs == "" {
				procs = "1"
			}
			name += " (cpu=" + procs + ")"
		}
		var s sample
		var err error
		if s.ns, err = strconv.ParseFloat(m[3], 64); err != nil {
			return nil, nil, err
		}
		if m[4] != "" {
			s.bytes, _ = strconv.ParseFloat(m[4], 64)
			s.allocs, _ = strconv.ParseFloat(m[5], 64)
		}
		if _, dup := res[name]; !dup {
			names = append(names, name)
		}
		res[name] = s
	}
	if len(res) == 0 {
		return nil, nil, fmt.Errorf("no benchmark results in the output")
	}
	return res, names, sc.Err()
}
