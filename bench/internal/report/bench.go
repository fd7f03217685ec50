package report

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
	"strconv"
	"strings"
)

// A Round maps a benchmark's name without "Benchmark" and the -N suffix
// ("Middleware/ours") to its metrics by unit ("ns/op", "allocs/op", ...).
// When the run had a -cpu list the suffix is kept as " (cpu=N)", since it
// tells the runs apart ("GrantedParallel/ours (cpu=2)").
type Round map[string]map[string]float64

// Unit makes a Metric of one unit of Rounds.
func Unit(unit string) Metric[Round] {
	return func(r Round, name string) (float64, bool) {
		x, ok := r[name][unit]
		return x, ok
	}
}

// benchLine matches "BenchmarkX/y-2   123   45.6 ns/op   7 unit ...".
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-(\d+))?\s+\d+\s+(.*)$`)

// ParseRound reads the output of one `go test -bench` run: the round and
// the benchmarks' names in the order they ran. With keepProcs (a run with
// a -cpu list) a name keeps its GOMAXPROCS as " (cpu=N)".
func ParseRound(out []byte, keepProcs bool) (Round, []string) {
	r := Round{}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		metrics := map[string]float64{}
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				metrics[f[i+1]] = v
			}
		}
		if _, ok := metrics["ns/op"]; !ok {
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
		if _, dup := r[name]; !dup {
			names = append(names, name)
		}
		r[name] = metrics
	}
	return r, names
}

// A Job is a benchmark run in rounds: the benchmarks of package Pkg, or of
// the package in directory Dir when Dir is set, matching Bench, run Count
// times with -test.benchtime Benchtime (and -test.cpu CPU, when set).
type Job struct {
	Pkg, Dir         string
	Count            int
	Benchtime, Bench string
	CPU              string
}

// RunRounds compiles the job's benchmarks once and runs the binary Count
// times with -test.count=1 (and -test.benchmem), so that each round
// measures every benchmark within seconds of the others: on a shared
// machine a change of load then shifts a whole round, and per-round ratios
// stay comparable. It returns the rounds, the names in order and the raw
// output of all rounds (benchstat's format). Progress goes to stderr.
func RunRounds(j Job) ([]Round, []string, []byte, error) {
	if j.Count < 1 {
		return nil, nil, nil, fmt.Errorf("count must be at least 1, got %d", j.Count)
	}
	dir, err := os.MkdirTemp("", "bench")
	if err != nil {
		return nil, nil, nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bench.test")
	build := exec.Command("go", "test", "-c", "-o", bin, j.Pkg)
	if j.Dir != "" {
		build = exec.Command("go", "test", "-c", "-o", bin, ".")
		build.Dir = j.Dir
	}
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return nil, nil, nil, fmt.Errorf("building the benchmarks: %w", err)
	}
	args := []string{"-test.run", "^$", "-test.bench", j.Bench, "-test.benchmem",
		"-test.benchtime", j.Benchtime, "-test.count", "1"}
	if j.CPU != "" {
		args = append(args, "-test.cpu", j.CPU)
	}
	var raw bytes.Buffer
	var rounds []Round
	var order []string
	for i := range j.Count {
		cmd := exec.Command(bin, args...)
		cmd.Stderr = os.Stderr
		res, err := cmd.Output()
		raw.Write(res)
		if err != nil {
			os.Stderr.Write(res)
			return nil, nil, nil, fmt.Errorf("round %d: %w", i+1, err)
		}
		r, names := ParseRound(res, j.CPU != "")
		if len(r) == 0 {
			return nil, nil, nil, fmt.Errorf("round %d: no benchmark results", i+1)
		}
		if order == nil {
			order = names
		}
		rounds = append(rounds, r)
		fmt.Fprintf(os.Stderr, "round %d/%d done, load %s\n", i+1, j.Count, LoadAvg())
	}
	return rounds, order, raw.Bytes(), nil
}

// Main is the whole main function of a bench program that runs package
// pkg's benchmarks in rounds (RunRounds) and prints write's tables: flags
// -count, -benchtime and -raw, the machine note, the load, the number of
// goals write reports missed. prog names the program in errors.
func Main(prog, pkg string, write func(out io.Writer, rounds []Round, order []string) (missed int)) {
	count := flag.Int("count", 5, "rounds: the benchmarks run this many times, each with -test.count=1")
	benchtime := flag.String("benchtime", "1s", "-test.benchtime of each run")
	raw := flag.String("raw", "", "also write the raw benchmark output to this file (benchstat format)")
	flag.Parse()
	rounds, order, rawOut, err := RunRounds(Job{Pkg: pkg, Count: *count, Benchtime: *benchtime, Bench: "."})
	if err == nil && *raw != "" {
		err = os.WriteFile(*raw, rawOut, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
		os.Exit(1)
	}
	fmt.Printf("<!-- %s -->\n\n", Machine())
	fmt.Printf("%d rounds of -benchtime=%s; load average (1, 5, 15 min) at the end: %s\n\n", *count, *benchtime, LoadAvg())
	if missed := write(os.Stdout, rounds, order); missed > 0 {
		fmt.Printf("\n%d goal(s) missed.\n", missed)
	}
}
