package shape_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/smoothrate/ratelimit/shape"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"1", 1},
		{"500", 500},
		{"500k", 500_000},
		{"500K", 500_000},
		{"500kB/s", 500_000},
		{"1MiB", 1 << 20},
		{"1MiB/s", 1 << 20},
		{"1.5KiB", 1536},
		{"10MB/s", 10e6},
		{"10 MB/s", 10e6},
		{" 10MB ", 10e6},
		{"2Gbit", 2e9 / 8},
		{"2Gbit/s", 2e9 / 8},
		{"2Gbits", 2e9 / 8},
		{"100Mbps", 100e6 / 8},
		{"100MBps", 100e6},
		{"8b", 1},
		{"8bit/s", 1},
		{"1Kib", 128},
		{"1kiB", 1024},
		{"3TiB", 3 << 40},
		{"1P", 1e15},
		{"1e9", 1e9}, // the exponent of jobs.ParseRate and run --rate: one grammar
		{"2.5e3k", 2.5e6},
		{"1PiB", 1 << 50},
		{".5k", 500},
		{"0.001", 0.001},
		{"1.", 1},
		{"inf", math.Inf(1)},
		{"unlimited", math.Inf(1)},
	} {
		got, err := shape.ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", shape.ErrSyntax},
		{"k", shape.ErrSyntax},
		{"MB/s", shape.ErrSyntax},
		{".", shape.ErrSyntax},
		{"1.2.3", shape.ErrSyntax},
		{"10mb", shape.ErrSyntax}, // milli or mega: refused
		{"10Xb", shape.ErrSyntax},
		{"10MB/m", shape.ErrSyntax},
		{"10MB/s/s", shape.ErrSyntax},
		{"10kps", shape.ErrSyntax}, // ps needs a unit
		{"0x10", shape.ErrSyntax},
		{"NaN", shape.ErrSyntax},
		{"1e999", shape.ErrRange}, // a number, too large: not a syntax error
		{"5 k B", shape.ErrSyntax},
		{"1_000", shape.ErrSyntax},
		{strings.Repeat("1", 401), shape.ErrSyntax}, // longer than the unit parser's 400-character bound
		{"0", shape.ErrRange},
		{"0k/s", shape.ErrRange},
		{"-5k", shape.ErrRange},
	} {
		got, err := shape.ParseRate(tc.in)
		if !errors.Is(err, tc.want) {
			t.Errorf("ParseRate(%q) = %v, %v; want an error wrapping %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"64KiB", 64 << 10},
		{"1.5M", 1_500_000},
		{"8Mbit", 1_000_000},
		{"1b", 0},  // 0.125 bytes rounds to 0
		{"4b", 1},  // 0.5 rounds half up
		{"0.4", 0}, //
		{"2.5B", 3},
		{"9223372036854775807", math.MaxInt64},
	} {
		got, err := shape.ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"9223372036854775808", shape.ErrRange},
		{"8192PiB", shape.ErrRange},
		{"-1", shape.ErrRange},
		{"1MB/s", shape.ErrSyntax},
		{"inf", shape.ErrSyntax},
		{"8EiB", shape.ErrRange},
		{"1Z", shape.ErrSyntax},
	} {
		got, err := shape.ParseSize(tc.in)
		if !errors.Is(err, tc.want) {
			t.Errorf("ParseSize(%q) = %v, %v; want an error wrapping %v", tc.in, got, err, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{999, "999 B"},
		{1000, "1.00 kB"},
		{1536, "1.54 kB"},
		{99_949, "99.9 kB"},
		{99_950, "100 kB"},
		{999_499, "999 kB"},
		{999_500, "1.00 MB"},
		{12_345_678, "12.3 MB"},
		{math.MaxInt64, "9.22 EB"},
		{-2048, "-2.05 kB"},
	} {
		if got := shape.FormatSize(tc.n); got != tc.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		r    float64
		want string
	}{
		{1e6, "1.00 MB/s"},
		{0.5, "0.500 B/s"},
		{0.0001234, "0.000123 B/s"},
		{0.0009996, "0.00100 B/s"}, // three significant digits after rounding
		// A subnormal: math.Log10 gives about -308 for any of them, which
		// printed 310 decimals, all zeros.
		{5e-324, "0." + strings.Repeat("0", 323) + "494 B/s"},
		{12.5, "12.5 B/s"},
		{math.Inf(1), "unlimited"},
		{math.NaN(), "NaN B/s"},
	} {
		if got := shape.FormatRate(tc.r); got != tc.want {
			t.Errorf("FormatRate(%v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

// FuzzParseRate checks the parsers' invariants on any input: they never
// panic, accept only what makes sense, agree with each other, and read back
// what FormatRate prints.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"500k", "1MiB/s", "10MB/s", "2Gbit", "100Mbps", "0.5", "inf", "-1k", "1.2.3", "10mb", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := shape.ParseRate(s)
		if err != nil {
			if !errors.Is(err, shape.ErrSyntax) && !errors.Is(err, shape.ErrRange) {
				t.Fatalf("ParseRate(%q): error %v wraps no sentinel", s, err)
			}
		} else if !(r > 0) {
			t.Fatalf("ParseRate(%q) = %v, not positive", s, r)
		}
		n, serr := shape.ParseSize(s)
		if serr == nil {
			if n < 0 {
				t.Fatalf("ParseSize(%q) = %d", s, n)
			}
			if n > 0 && err == nil && math.Abs(r-float64(n)) > 0.5+r*1e-15 {
				t.Fatalf("ParseSize(%q) = %d but ParseRate = %v", s, n, r)
			}
			if r2, err := shape.ParseRate(strings.TrimSpace(s) + "/s"); err == nil && r2 != r && n > 0 {
				t.Fatalf("ParseRate(%q/s) = %v, ParseRate(%q) = %v", s, r2, s, r)
			}
		}
		if err == nil { // FormatRate prints no exponent: up to 332 characters
			back, err := shape.ParseRate(shape.FormatRate(r))
			if err != nil {
				t.Fatalf("FormatRate(%v) = %q does not parse: %v", r, shape.FormatRate(r), err)
			}
			if math.Abs(back-r) > r*0.005 {
				t.Fatalf("FormatRate(%v) = %q reads back as %v", r, shape.FormatRate(r), back)
			}
		}
	})
}
