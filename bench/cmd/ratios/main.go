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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// goal is one acceptance criterion: ours/peer median ns/op <= max.
type goal struct {
	ours, peer string
	max        float64
}

var goals = []goal{
	{"Granted/ours", "Granted/xrate", 0.6},
	{"Granted/ours", "Granted/uber", 0.9},
	{"Denied/ours", "Denied/xrate", 0.4},
	{"GrantedParallel/ours", "GrantedParallel/xrate", 0.9},
	{"DeniedParallel/ours", "DeniedParallel/xrate", 0.9},
}

// extra are ratios shown without a goal.
var extra = [][2]string{
	{"Granted/ours", "Granted/juju"},
	{"GrantedParallel/ours", "GrantedParallel/uber"},
	{"GrantedParallel/ours", "GrantedParallel/juju"},
	{"Denied/ours", "Denied/juju"},
	{"Reserve/ours", "Reserve/xrate"},
	{"ReserveParallel/ours", "ReserveParallel/xrate"},
	{"BlockingNoWait/ours", "BlockingNoWait/xrate"},
	{"BlockingNoWait/ours", "BlockingNoWait/juju"},
}

type sample struct{ ns, bytes, allocs float64 }

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

	fmt.Fprintf(out, "<!-- %s -->\n\n", machine())
	loadBefore := loadavg()
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
		fmt.Fprintf(os.Stderr, "round %d/%d done, load %s\n", i+1, count, loadavg())
	}
	if rawPath != "" {
		if err := os.WriteFile(rawPath, rawAll.Bytes(), 0o644); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "%d rounds of -benchtime=%s; load average (1, 5, 15 min) before: %s, after: %s\n\n",
		count, benchtime, loadBefore, loadavg())
	fmt.Fprintln(out, "| Benchmark | median ns/op | min | max | B/op | allocs/op |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for _, name := range order {
		ns := column(rounds, name, func(s sample) float64 { return s.ns })
		b := column(rounds, name, func(s sample) float64 { return s.bytes })
		a := column(rounds, name, func(s sample) float64 { return s.allocs })
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", name,
			num(median(ns)), num(slices.Min(ns)), num(slices.Max(ns)), num(median(b)), num(median(a)))
	}

	var rows []string
	failed := 0
	for _, g := range goals {
		r, lo, hi, ok := ratio(rounds, g.ours, g.peer)
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
		if r, lo, hi, ok := ratio(rounds, e[0], e[1]); ok {
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

func column(rounds []map[string]sample, name string, f func(sample) float64) []float64 {
	var v []float64
	for _, r := range rounds {
		if s, ok := r[name]; ok {
			v = append(v, f(s))
		}
	}
	return v
}

// ratio returns ours/peer of the medians and the range of per-round ratios.
func ratio(rounds []map[string]sample, ours, peer string) (r, lo, hi float64, ok bool) {
	ns := func(s sample) float64 { return s.ns }
	o, p := column(rounds, ours, ns), column(rounds, peer, ns)
	if len(o) == 0 || len(p) == 0 {
		return 0, 0, 0, false
	}
	var per []float64
	for _, rd := range rounds {
		a, okA := rd[ours]
		b, okB := rd[peer]
		if okA && okB && b.ns > 0 {
			per = append(per, a.ns/b.ns)
		}
	}
	if len(per) == 0 {
		return 0, 0, 0, false
	}
	return median(o) / median(p), slices.Min(per), slices.Max(per), true
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// num prints three significant digits or so: 187, 53.2, 1.01.
func num(x float64) string {
	switch {
	case x >= 100 || x == float64(int64(x)):
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// machine describes where the figures were taken.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %s/%s, %d CPUs (GOMAXPROCS %d), %s, %s UTC",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), model,
		time.Now().UTC().Format("2006-01-02 15:04"))
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
