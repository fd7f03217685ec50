package report

import (
	"math"
	"regexp"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	if got := Median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("Median odd = %v, want 2", got)
	}
	v := []float64{4, 1, 3, 2}
	if got := Median(v); got != 2.5 {
		t.Errorf("Median even = %v, want 2.5", got)
	}
	if v[0] != 4 || v[3] != 2 {
		t.Errorf("Median reordered its argument: %v", v)
	}
}

// byName is the simplest round type: a benchmark name to its ns/op.
func byName(r map[string]float64, name string) (float64, bool) {
	x, ok := r[name]
	return x, ok
}

func TestRatio(t *testing.T) {
	rounds := []map[string]float64{
		{"a": 50, "b": 100},
		{"a": 60, "b": 100},
		{"a": 40, "b": 50},
	}
	r, lo, hi, ok := Ratio(rounds, byName, "a", "b")
	if !ok || r != 0.5 || lo != 0.5 || math.Abs(hi-0.8) > 1e-12 {
		t.Errorf("Ratio = %v [%v, %v] ok=%v; want 0.5 [0.5, 0.8] true", r, lo, hi, ok)
	}
	if _, _, _, ok := Ratio(rounds, byName, "a", "missing"); ok {
		t.Error("Ratio with a missing benchmark reported ok")
	}
}

// The per-round range only uses rounds that have both benchmarks and a
// positive denominator, while the medians use every round that has each.
func TestRatioPartialRounds(t *testing.T) {
	rounds := []map[string]float64{
		{"a": 10, "b": 0},
		{"a": 30},
		{"a": 20, "b": 40},
		{"b": 80},
	}
	r, lo, hi, ok := Ratio(rounds, byName, "a", "b")
	// medians: a = 20 (10, 30, 20), b = 40 (0, 40, 80); per-round: only 20/40.
	if !ok || r != 0.5 || lo != 0.5 || hi != 0.5 {
		t.Errorf("Ratio = %v [%v, %v] ok=%v; want 0.5 [0.5, 0.5] true", r, lo, hi, ok)
	}
	if _, _, _, ok := Ratio(rounds[:2], byName, "a", "b"); ok {
		t.Error("Ratio with no usable round reported ok")
	}
}

func TestColumn(t *testing.T) {
	rounds := []map[string]float64{{"a": 1}, {"b": 2}, {"a": 3}}
	got := Column(rounds, byName, "a")
	if len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("Column = %v, want [1 3]", got)
	}
}

func TestNum(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want string
	}{
		{187.4, "187"}, {100, "100"}, {53.17, "53.2"}, {10, "10"}, {7, "7"},
		{1.006, "1.01"}, {0.456, "0.46"}, {0, "0"},
	} {
		if got := Num(c.x); got != c.want {
			t.Errorf("Num(%v) = %q, want %q", c.x, got, c.want)
		}
	}
}

func TestLoadFields(t *testing.T) {
	if got := loadFields("0.11 0.20 0.31 1/234 5678\n"); got != "0.11 0.20 0.31" {
		t.Errorf("loadFields = %q, want %q", got, "0.11 0.20 0.31")
	}
	if got := loadFields("0.11\n"); got != "unknown" {
		t.Errorf("loadFields of a short line = %q, want unknown", got)
	}
}

func TestMachine(t *testing.T) {
	plain := Machine()
	if !regexp.MustCompile(`^go\S+, \w+/\w+, \d+ CPUs \(GOMAXPROCS \d+\), .+, \d{4}-\d\d-\d\d \d\d:\d\d UTC$`).MatchString(plain) {
		t.Errorf("Machine() = %q, not the expected shape", plain)
	}
	with := Machine("redis-server v=7")
	if !strings.Contains(with, ", redis-server v=7, ") || !strings.HasSuffix(with, " UTC") {
		t.Errorf("Machine(extra) = %q, want the extra before the time", with)
	}
}

func TestMissing(t *testing.T) {
	out := "| a | 1 |\n| b | 2 |\n"
	if m := Missing(out, "| a | 1 |", "| b | 3 |", "| b | 2 |"); len(m) != 1 || m[0] != "| b | 3 |" {
		t.Errorf("Missing = %q, want [\"| b | 3 |\"]", m)
	}
}
