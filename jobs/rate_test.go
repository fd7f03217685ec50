package jobs_test

import (
	"errors"
	"math"
	"testing"

	"github.com/smoothrate/ratelimit/jobs"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"5", 5},
		{"5/s", 5},
		{"0.5/sec", 0.5},
		{"300/m", 5},
		{"300/min", 5},
		{"7200/h", 2},
		{"86400/d", 1},
		{"3/100ms", 30},
		{"1/1m30s", 1.0 / 90},
		{" 10 / s ", 10},
		{"1e3", 1000},
		{"inf", math.Inf(1)},
		{"unlimited", math.Inf(1)},
	} {
		got, err := jobs.ParseRate(tc.in)
		// Equal, or within a relative 1e-12 (|Inf−Inf| is NaN, which
		// compares false either way: the equality catches the infinities).
		if err != nil || !(got == tc.want || math.Abs(got-tc.want) <= 1e-12*tc.want) {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "0", "-1/s", "five", "5/", "5/y", "5/0s", "5/-1s", "NaN", "1e999", "0x10", "5/s/s"} {
		if got, err := jobs.ParseRate(in); !errors.Is(err, jobs.ErrInvalidRate) {
			t.Errorf("ParseRate(%q) = %v, %v; want ErrInvalidRate", in, got, err)
		}
	}
}
