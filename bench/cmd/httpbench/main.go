// Command httpbench runs the benchmarks of package httpbench (package
// httplimit's middleware against go-chi/httprate, ulule/limiter,
// sethvargo/go-limiter and tollbooth, and a reverse proxy with and without
// the limiter) and prints, as Markdown, the medians, what each middleware
// adds to a bare handler, and the ratios against the project's goals:
//
//	cd bench && go run ./cmd/httpbench -count 5
//
// Like cmd/ratios it compiles the benchmarks once and runs them count
// times, so that each round measures every middleware within seconds of
// the others; medians over rounds, and ratios of medians next to the range
// of the per-round ratios.
package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/smoothrate/ratelimit/bench/internal/report"
)

func main() {
	report.Main("httpbench", "github.com/smoothrate/ratelimit/bench/httpbench", write)
}

// peers are the middlewares ours is compared with.
var peers = []string{"httprate", "ulule", "sethvargo", "tollbooth"}

// addAdded gives every benchmark of a group ("Middleware/x") the metrics
// "added-ns/op" and "added-allocs/op": its value minus the bare handler's
// ("Middleware/none") in the same round.
func addAdded(rounds []report.Round) {
	for _, r := range rounds {
		for name, m := range r {
			group, _, ok := strings.Cut(name, "/")
			base, okBase := r[group+"/none"]
			if !ok || !okBase {
				continue
			}
			m["added-ns/op"] = m["ns/op"] - base["ns/op"]
			m["added-allocs/op"] = m["allocs/op"] - base["allocs/op"]
		}
	}
}

// write prints the tables and returns the number of goals missed.
func write(out io.Writer, rounds []report.Round, order []string) int {
	addAdded(rounds)
	med := func(unit, name string) (float64, bool) {
		v := report.Column(rounds, report.Unit(unit), name)
		if len(v) == 0 {
			return 0, false
		}
		return report.Median(v), true
	}
	cell := func(unit, name string) string {
		if x, ok := med(unit, name); ok {
			return report.Num(x)
		}
		return "–"
	}
	fmt.Fprintln(out, "| Benchmark | median ns/op | min | max | added ns/op | B/op | allocs/op | added allocs/op |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, name := range order {
		ns := report.Column(rounds, report.Unit("ns/op"), name)
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, report.Num(report.Median(ns)),
			report.Num(slices.Min(ns)), report.Num(slices.Max(ns)), cell("added-ns/op", name),
			cell("B/op", name), cell("allocs/op", name), cell("added-allocs/op", name))
	}

	fmt.Fprintln(out)
	fmt.Fprintln(out, "| Ratio | of medians | per-round range | goal | met |")
	fmt.Fprintln(out, "|---|---:|---:|---:|:---:|")
	missed := 0
	row := func(what, num, den, unit string, bound float64, label string) {
		r, lo, hi, ok := report.Ratio(rounds, report.Unit(unit), num, den)
		if !ok {
			return
		}
		met := ""
		if label != "" {
			met = "yes"
			if r > bound {
				met, missed = "**no**", missed+1
			}
		}
		fmt.Fprintf(out, "| %s | %s | %s–%s | %s | %s |\n", what, report.Num(r), report.Num(lo), report.Num(hi), label, met)
	}
	for _, group := range []string{"Middleware", "MiddlewareParallel"} {
		// The goal is against the fastest peer (by median added ns/op).
		fastest, best := "", 0.0
		for _, p := range peers {
			if x, ok := med("added-ns/op", group+"/"+p); ok && (fastest == "" || x < best) {
				fastest, best = p, x
			}
		}
		for _, p := range peers {
			label, bound := "", 0.0
			if p == fastest {
				label, bound = "≤ 0.5 (fastest peer)", 0.5
			}
			row(fmt.Sprintf("%s: ours / %s, added ns/op", group, p), group+"/ours", group+"/"+p, "added-ns/op", bound, label)
		}
		if x, ok := med("added-allocs/op", group+"/ours"); ok {
			met := "yes"
			if x > 2 {
				met, missed = "**no**", missed+1
			}
			fmt.Fprintf(out, "| %s: ours, added allocs/op | %s | | ≤ 2 | %s |\n", group, report.Num(x), met)
		}
	}
	row("proxy: with limiter / without, ns/op (inverse throughput)", "Proxy/ours", "Proxy/none", "ns/op", 1.05, "≤ 1.05")
	return missed
}
