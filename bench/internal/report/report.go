package report

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Median returns the median of v (the mean of the middle two when len(v) is
// even) without reordering v. The programs summarise rounds by their median
// so that one round hit by a stall of the shared machine does not move the
// figure. v must not be empty.
func Median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// A Metric returns a benchmark's value in one round, and whether the round
// has it. It lets Column and Ratio work on each program's own round type.
type Metric[R any] func(round R, name string) (float64, bool)

// Column returns the values of benchmark name over the rounds that have it,
// in round order.
func Column[R any](rounds []R, metric Metric[R], name string) []float64 {
	var v []float64
	for _, r := range rounds {
		if x, ok := metric(r, name); ok {
			v = append(v, x)
		}
	}
	return v
}

// Ratio returns num/den of the medians of a metric over the rounds, and
// the smallest and largest of the per-round ratios num/den, taken only in
// rounds that have both and a positive den. The ratio of medians is the
// headline figure; the per-round range shows how much a shared machine let
// it move, since each round measures both within seconds of each other.
// ok is false when either benchmark is missing or no round has both.
func Ratio[R any](rounds []R, metric Metric[R], num, den string) (r, lo, hi float64, ok bool) {
	n, d := Column(rounds, metric, num), Column(rounds, metric, den)
	if len(n) == 0 || len(d) == 0 {
		return 0, 0, 0, false
	}
	var per []float64
	for _, rd := range rounds {
		a, okA := metric(rd, num)
		b, okB := metric(rd, den)
		if okA && okB && b > 0 {
			per = append(per, a/b)
		}
	}
	if len(per) == 0 {
		return 0, 0, 0, false
	}
	return Median(n) / Median(d), slices.Min(per), slices.Max(per), true
}

// Num prints three significant digits or so: 187, 53.2, 1.01.
func Num(x float64) string {
	switch {
	case x >= 100 || x == float64(int64(x)):
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// Machine describes where the figures were taken: Go version, OS/arch,
// CPUs, CPU model, then each of extra (e.g. the redis-server version), then
// the time in UTC. The figures mean little without it.
func Machine(extra ...string) string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	parts := []string{
		fmt.Sprintf("%s, %s/%s, %d CPUs (GOMAXPROCS %d)",
			runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0)),
		model,
	}
	parts = append(parts, extra...)
	parts = append(parts, time.Now().UTC().Format("2006-01-02 15:04")+" UTC")
	return strings.Join(parts, ", ")
}

// LoadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg
// ("0.11 0.20 0.31"), or "unknown". The programs print it before and after
// a run because on a shared machine the load explains odd figures.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return loadFields(string(b))
}

func loadFields(s string) string {
	f := strings.Fields(s)
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Missing returns the lines of want that out does not contain: for the
// tests of the programs that print tables.
func Missing(out string, want ...string) []string {
	var m []string
	for _, w := range want {
		if !strings.Contains(out, w) {
			m = append(m, w)
		}
	}
	return m
}
