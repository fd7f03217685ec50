package throttle

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// vectorStep is one line of a vector file: a limit change, a Reset, or a
// decision with its expected answer.
type vectorStep struct {
	line  int
	limit *struct {
		alg Algorithm
		l   Limit
	}
	reset string
	at    time.Duration
	key   string
	n     int
	want  Decision
}

// readVectors parses testdata/throttle/<name> (format: see redis-cell.txt).
func readVectors(path string) ([]vectorStep, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var steps []vectorStep
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || strings.HasPrefix(fs[0], "#") {
			continue
		}
		st, err := parseVectorLine(fs)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, ln, err)
		}
		st.line = ln
		steps = append(steps, st)
	}
	return steps, sc.Err()
}

func parseVectorLine(fs []string) (vectorStep, error) {
	var st vectorStep
	switch {
	case fs[0] == "limit" && len(fs) == 5:
		alg, err := ParseAlgorithm(fs[1])
		if err != nil {
			return st, err
		}
		count, err1 := strconv.Atoi(fs[2])
		period, err2 := time.ParseDuration(fs[3])
		burst, err3 := strconv.Atoi(fs[4])
		if err1 != nil || err2 != nil || err3 != nil {
			return st, fmt.Errorf("bad limit %q", fs)
		}
		st.limit = &struct {
			alg Algorithm
			l   Limit
		}{alg, Limit{Count: count, Period: period, Burst: burst}}
		return st, nil
	case fs[0] == "reset" && len(fs) == 2:
		st.reset = fs[1]
		return st, nil
	case len(fs) != 7:
		return st, fmt.Errorf("want 7 fields, have %q", fs)
	}
	var err error
	if st.at, err = time.ParseDuration(fs[0]); err != nil {
		return st, err
	}
	st.key = fs[1]
	if st.n, err = strconv.Atoi(fs[2]); err != nil {
		return st, err
	}
	switch fs[3] {
	case "yes":
		st.want.Allowed = true
	case "no":
	default:
		return st, fmt.Errorf("allowed must be yes or no, not %q", fs[3])
	}
	if st.want.Remaining, err = strconv.Atoi(fs[4]); err != nil {
		return st, err
	}
	if fs[5] == "never" {
		st.want.RetryAfter = Never
	} else if st.want.RetryAfter, err = time.ParseDuration(fs[5]); err != nil {
		return st, err
	}
	if st.want.ResetAfter, err = time.ParseDuration(fs[6]); err != nil {
		return st, err
	}
	return st, nil
}

// TestVectors replays every file of testdata/throttle through every store:
// redis-cell's and throttled's GCRA rows, redis_rate's tests, and
// hand-derived window and log rows. Every field of every Decision must
// match.
func TestVectors(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "throttle", "*.txt"))
	if err != nil || len(files) < 3 {
		t.Fatalf("vector files: %v, %v", files, err)
	}
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		for _, file := range files {
			t.Run(filepath.Base(file), func(t *testing.T) {
				steps, err := readVectors(file)
				if err != nil {
					t.Fatal(err)
				}
				clk := newSetClock()
				store := newStore(clk)
				var lim *Limiter
				decisions := 0
				for _, st := range steps {
					switch {
					case st.limit != nil:
						lim = mustNew(t, store, st.limit.alg, st.limit.l)
						continue
					case st.reset != "":
						if err := lim.Reset(context.Background(), st.reset); err != nil {
							t.Fatalf("line %d: %v", st.line, err)
						}
						continue
					}
					clk.Set(clocktest.Epoch.Add(st.at))
					want := st.want
					want.Limit = lim.Limit().Burst
					got := mustAllow(t, lim, st.key, st.n)
					if got != want {
						t.Errorf("line %d: AllowN(%q, %d) at %v = %+v, want %+v", st.line, st.key, st.n, st.at, got, want)
					}
					decisions++
				}
				if decisions == 0 {
					t.Fatal("no decisions in file")
				}
			})
		}
	})
}

// TestThrottledCustomPeriod ports throttled's TestRateLimitCustomPeriod:
// PerDuration(3, 10ms) with MaxBurst 0 is Limit{Count: 3, Period: 10ms,
// Burst: 1}; 27 calls, sleeping one period after each refusal. throttled
// runs it on the real clock and asserts that calls i%3 == 0 (i ≠ 0) are
// refused. On a clock where calls take no time the outcome is exact: a call
// right after an admitted one is refused (the emission interval, 3.33 ms,
// has not passed) and a call one period after a refusal is admitted, so
// calls alternate.
func TestThrottledCustomPeriod(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		clk := newSetClock()
		lim := mustNew(t, newStore(clk), GCRA, Limit{Count: 3, Period: 10 * time.Millisecond, Burst: 1})
		for i := range 27 {
			d := mustAllow(t, lim, "bar", 1)
			if d.Allowed != (i%2 == 0) {
				t.Fatalf("call %d: Allowed = %v, want %v (%+v)", i, d.Allowed, i%2 == 0, d)
			}
			if !d.Allowed {
				if d.RetryAfter != 3333*time.Microsecond+time.Microsecond {
					t.Fatalf("call %d: RetryAfter = %v, want 3.334ms (10ms/3 rounded up to the µs)", i, d.RetryAfter)
				}
				clk.Add(10 * time.Millisecond)
			}
		}
	})
}
