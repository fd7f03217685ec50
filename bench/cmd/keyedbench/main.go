// Command keyedbench runs the benchmarks of package keyed (throttle's
// MemoryStore against sethvargo/go-limiter's memorystore, throttled's GCRA
// memstore, ulule/limiter's memory store and go-chi/httprate's local
// counter, at 100 000 live keys, with three floors: the caller's key
// hashed, and found in Go's map with 8-byte and with 64-byte values; and
// the machine's memory latency) and prints, as Markdown, the medians and
// the ratios of ours to each peer against the project's goals (≤ 0.5 of
// the fastest peer's ns/op, serial and parallel; 0 allocations):
//
//	cd bench && go run ./cmd/keyedbench -count 5
//
// Like cmd/ratios it compiles the benchmarks once and runs them count
// times, so that each round measures every store within seconds of the
// others; medians over rounds, ratios of medians next to the range of the
// per-round ratios.
package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/smoothrate/ratelimit/bench/internal/report"
)

func main() {
	report.Main("keyedbench", "github.com/smoothrate/ratelimit/bench/keyed", write)
}

// ours is the benchmark the goals are about; the other "ours-" variants
// are shown for comparison.
const ours = "ours-gcra"

// peers are the libraries ours is compared with.
var peers = []string{"sethvargo", "throttled", "ulule", "httprate"}

// write prints the tables and returns the number of goals missed.
func write(out io.Writer, rounds []report.Round, order []string) int {
	ns, allocs := report.Unit("ns/op"), report.Unit("allocs/op")
	fmt.Fprintln(out, "| Benchmark | median ns/op | min | max | B/op | allocs/op |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for _, name := range order {
		if strings.HasPrefix(name, inTurns+"/") {
			continue // writeInTurns'
		}
		v := report.Column(rounds, ns, name)
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", name, report.Num(report.Median(v)),
			report.Num(slices.Min(v)), report.Num(slices.Max(v)),
			report.Num(report.Median(report.Column(rounds, report.Unit("B/op"), name))),
			report.Num(report.Median(report.Column(rounds, allocs, name))))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| Ratio (ns/op) | of medians | per-round range | goal | met |")
	fmt.Fprintln(out, "|---|---:|---:|---:|:---:|")
	missed := 0
	halves := map[string]float64{} // half the fastest peer's median, per group
	for _, group := range []string{"Keyed", "KeyedParallel"} {
		fastest, best := "", 0.0
		for _, p := range peers {
			if v := report.Column(rounds, ns, group+"/"+p); len(v) > 0 && (fastest == "" || report.Median(v) < best) {
				fastest, best = p, report.Median(v)
			}
		}
		for _, p := range peers {
			r, lo, hi, ok := report.Ratio(rounds, ns, group+"/"+ours, group+"/"+p)
			if !ok {
				continue
			}
			goal, met := "", ""
			if p == fastest {
				goal, met = "≤ 0.5 (fastest peer)", "yes"
				if r > 0.5 {
					met, missed = "**no**", missed+1
				}
			}
			fmt.Fprintf(out, "| %s: %s / %s | %s | %s–%s | %s | %s |\n", group, ours, p,
				report.Num(r), report.Num(lo), report.Num(hi), goal, met)
		}
		halves[group] = best / 2
		if v := report.Column(rounds, allocs, group+"/"+ours); len(v) > 0 {
			met := "yes"
			if report.Median(v) > 0 {
				met, missed = "**no**", missed+1
			}
			fmt.Fprintf(out, "| %s: %s allocs/op | %s | | 0 | %s |\n", group, ours, report.Num(report.Median(v)), met)
		}
	}
	writeFloors(out, rounds, halves)
	writeInTurns(out, rounds, order)
	return missed
}

// inTurns is the benchmark that measures ours and a peer in turns of a
// few milliseconds each (BenchmarkKeyedAlternating).
const inTurns = "KeyedAlternating"

// writeInTurns prints the rounds of BenchmarkKeyedAlternating: per peer
// and number of goroutines, the medians of ours's and the peer's ns per
// decision and of their ratio in each round, with the ratio's range. Its
// ratios vary less from round to round than the ratios of the separate
// benchmarks, which are measured seconds apart: both stores see the same
// phases of a shared machine.
func writeInTurns(out io.Writer, rounds []report.Round, order []string) {
	var names []string
	for _, name := range order {
		if strings.HasPrefix(name, inTurns+"/") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| In turns | ours ns/op | peer ns/op | ratio (median of rounds) | per-round range |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|")
	for _, name := range names {
		// KeyedAlternating/httprate/procs=1
		f := strings.Split(name, "/")
		if len(f) != 3 {
			continue
		}
		group := "KeyedParallel"
		if f[2] == "procs=1" {
			group = "Keyed"
		}
		r := report.Column(rounds, report.Unit("ratio"), name)
		if len(r) == 0 {
			continue
		}
		fmt.Fprintf(out, "| %s: %s / %s | %s | %s | %s | %s–%s |\n", group, ours, f[1],
			report.Num(report.Median(report.Column(rounds, report.Unit("ours-ns/op"), name))),
			report.Num(report.Median(report.Column(rounds, report.Unit("peer-ns/op"), name))),
			report.Num(report.Median(r)), report.Num(slices.Min(r)), report.Num(slices.Max(r)))
	}
}

// floors are the bench's rows that are not limiters but parts of every
// decision: reading and hashing the caller's key, finding it in Go's map,
// and finding it there when each key takes 64 bytes (twice our 32-byte
// entry).
var floors = []string{"floor-hash", "floor-map", "floor-map64"}

// writeFloors prints, per group, the floors' medians next to ours and to
// the goal (half the fastest peer): a goal below floor-hash asks for less
// time than reading the key alone takes.
func writeFloors(out io.Writer, rounds []report.Round, halves map[string]float64) {
	ns := report.Unit("ns/op")
	median := func(name string) string {
		if v := report.Column(rounds, ns, name); len(v) > 0 {
			return report.Num(report.Median(v))
		}
		return "–"
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "| Median ns/op | %s | %s | goal (½ fastest peer) |\n", strings.Join(floors, " | "), ours)
	fmt.Fprintf(out, "|---|%s---:|---:|\n", strings.Repeat("---:|", len(floors)))
	for _, group := range []string{"Keyed", "KeyedParallel"} {
		half, ok := halves[group]
		if !ok {
			continue
		}
		fmt.Fprintf(out, "| %s |", group)
		for _, f := range floors {
			fmt.Fprintf(out, " %s |", median(group+"/"+f))
		}
		fmt.Fprintf(out, " %s | %s |\n", median(group+"/"+ours), report.Num(half))
	}
}
