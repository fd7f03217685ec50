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
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/smoothrate/ratelimit/bench/internal/report"
)

// goal is one acceptance criterion: ours/peer median ns/op <= max.
type goal struct {
	ours, peer string
	max        float64
}

// The goals hold on any Linux clock (the kernel's clocksource tsc or
// kvm-clock alike), and in parallel at GOMAXPROCS 2 ours must be no slower
// than uber's lock-free Take.
var goals = []goal{
	{"Granted/ours", "Granted/xrate", 0.3},
	{"Granted/ours", "Granted/uber", 0.5},
	{"Denied/ours", "Denied/xrate", 0.2},
	{"GrantedParallel/ours", "GrantedParallel/xrate", 0.5},
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

var (
	nsOf     = report.Unit("ns/op")
	bytesOf  = report.Unit("B/op")
	allocsOf = report.Unit("allocs/op")
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
	loadBefore := report.LoadAvg()
	rounds, order, raw, err := report.RunRounds(report.Job{Pkg: "github.com/smoothrate/ratelimit/bench",
		Dir: pkgDir, Count: count, Benchtime: benchtime, Bench: bench, CPU: cpu})
	if err != nil {
		return err
	}
	if rawPath != "" {
		if err := os.WriteFile(rawPath, raw, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "<!-- %s -->\n\n", report.Machine())
	fmt.Fprintf(out, "%d rounds of -benchtime=%s; load average (1, 5, 15 min) before: %s, after: %s\n\n",
		count, benchtime, loadBefore, report.LoadAvg())
	write(out, rounds, order, suffixes(cpu))
	return nil
}

// suffixes are what the names of a run with this -cpu list end with: ""
// without one, " (cpu=N)" for each N of the list with one.
func suffixes(cpu string) []string {
	if cpu == "" {
		return []string{""}
	}
	var s []string
	for n := range strings.SplitSeq(cpu, ",") {
		s = append(s, " (cpu="+strings.TrimSpace(n)+")")
	}
	return s
}

// write prints the table of medians and the ratios, each goal and extra
// ratio once per suffix (per GOMAXPROCS of a -cpu list), and returns the
// number of goals missed.
func write(out io.Writer, rounds []report.Round, order, suffixes []string) int {
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
	for _, sfx := range suffixes {
		for _, g := range goals {
			r, lo, hi, ok := report.Ratio(rounds, nsOf, g.ours+sfx, g.peer+sfx)
			if !ok {
				continue
			}
			met := "yes"
			if r > g.max {
				met, failed = "**no**", failed+1
			}
			rows = append(rows, fmt.Sprintf("| %s / %s | %.2f | %.2f–%.2f | ≤ %g | %s |", g.ours+sfx, g.peer+sfx, r, lo, hi, g.max, met))
		}
		for _, e := range extra {
			if r, lo, hi, ok := report.Ratio(rounds, nsOf, e[0]+sfx, e[1]+sfx); ok {
				rows = append(rows, fmt.Sprintf("| %s / %s | %.2f | %.2f–%.2f | | |", e[0]+sfx, e[1]+sfx, r, lo, hi))
			}
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
	return failed
}
