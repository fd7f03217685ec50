package units_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/units"
)

// TestOneNumberGrammar is the reason the package exists: "run --rate 1e3"
// was accepted while "pipe 1e9" was refused, because package jobs read its
// numbers with strconv and package shape with its own scanner. Every parser
// now reads the same numbers.
func TestOneNumberGrammar(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"1e9", 1e9},
		{"1e3", 1e3},
		{"2.5e-3", 2.5e-3},
		{"1.5e+2", 150},
		{"+5", 5},
		{".25", 0.25},
		{"7", 7},
	} {
		n, err := units.Number(tc.in)
		require.NoError(t, err, "Number(%q)", tc.in)
		assert.InDelta(t, tc.want, n, 1e-12*tc.want, "Number(%q)", tc.in)
		b, err := units.ByteRate(tc.in)
		require.NoError(t, err, "ByteRate(%q)", tc.in)
		assert.InDelta(t, tc.want, b, 1e-12*tc.want, "ByteRate(%q)", tc.in)
		j, err := units.JobRate(tc.in)
		require.NoError(t, err, "JobRate(%q)", tc.in)
		assert.InDelta(t, tc.want, j, 1e-12*tc.want, "JobRate(%q)", tc.in)
	}
	for _, in := range []string{"", "five", "NaN", "0x10", "1_000", "1.2.3", "e9", "1e", "1E9x", "--5"} {
		_, err := units.Number(in)
		assert.ErrorIs(t, err, units.ErrSyntax, "Number(%q)", in)
		_, err = units.ByteRate(in)
		assert.ErrorIs(t, err, units.ErrSyntax, "ByteRate(%q)", in)
		_, err = units.JobRate(in)
		assert.ErrorIs(t, err, units.ErrSyntax, "JobRate(%q)", in)
	}
}

// TestOutOfRangeIsNotNotANumber: a number too large for a float64 is a
// number; the message must say what is wrong with it.
func TestOutOfRangeIsNotNotANumber(t *testing.T) {
	for name, parse := range map[string]func(string) (float64, error){
		"Number": units.Number, "ByteRate": units.ByteRate, "JobRate": units.JobRate,
	} {
		for _, in := range []string{"1e999", "1e309"} {
			_, err := parse(in)
			assert.ErrorIs(t, err, units.ErrRange, "%s(%q)", name, in)
			assert.NotErrorIs(t, err, units.ErrSyntax, "%s(%q)", name, in)
			if assert.Error(t, err) {
				assert.NotContains(t, err.Error(), "not a number", "%s(%q)", name, in)
				assert.Contains(t, err.Error(), "too large", "%s(%q)", name, in)
			}
		}
	}
	_, err := units.ByteRate("1e-400")
	assert.ErrorIs(t, err, units.ErrRange)
	_, err = units.Size("1e30")
	assert.ErrorIs(t, err, units.ErrRange)
}

func TestMessagesHaveNoPrefix(t *testing.T) {
	_, err := units.ByteRate("0")
	require.Error(t, err)
	assert.Equal(t, `"0": a rate must be positive`, err.Error())
	_, err = units.Size(strings.Repeat("9", 30))
	require.Error(t, err)
	assert.Equal(t, `"99999999999999999999…": more than 9223372036854775807 bytes`, err.Error())
}

func TestByteUnits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"500k", 500e3},
		{"1MiB/s", 1 << 20},
		{"10 MB/s", 10e6},
		{"2Gbit", 2e9 / 8},
		{"100Mbps", 100e6 / 8},
		{"1.5e3k", 1.5e6},
		{"1EiB", math.Ldexp(1, 60)},
	} {
		got, err := units.ByteRate(tc.in)
		require.NoError(t, err, tc.in)
		assert.InDelta(t, tc.want, got, 1e-12*tc.want, tc.in)
	}
	for _, in := range []string{"10mb", "10kps", "10MB/m", "5 k B"} {
		_, err := units.ByteRate(in)
		assert.ErrorIs(t, err, units.ErrSyntax, in)
	}
	n, err := units.Size("4b")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n) // half a byte rounds up
	_, err = units.Size("1k/s")
	assert.ErrorIs(t, err, units.ErrSyntax)
	_, err = units.Size("-1")
	assert.ErrorIs(t, err, units.ErrRange)
}

func TestJobPeriods(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"300/m", 5}, {"300/min", 5}, {"7200/h", 2}, {"86400/d", 1},
		{"3/100ms", 30}, {"1/1m30s", 1.0 / 90}, {" 10 / s ", 10}, {"inf", math.Inf(1)},
	} {
		got, err := units.JobRate(tc.in)
		require.NoError(t, err, tc.in)
		if math.IsInf(tc.want, 1) {
			assert.True(t, math.IsInf(got, 1), tc.in)
			continue
		}
		assert.InDelta(t, tc.want, got, 1e-12*tc.want, tc.in)
	}
	for _, in := range []string{"5/", "5/y", "5/0s", "5/-1s", "5/s/s", "5k"} {
		_, err := units.JobRate(in)
		assert.ErrorIs(t, err, units.ErrSyntax, in)
	}
	for _, in := range []string{"0", "-1/s"} {
		_, err := units.JobRate(in)
		assert.ErrorIs(t, err, units.ErrRange, in)
	}
}

// FuzzParse: on any input the parsers do not panic, every error wraps one
// of the two sentinels, and what they accept is a positive finite rate (or
// +Inf for the words that mean no limit) and a non-negative size.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"500k", "1MiB/s", "1e9", "2.5e-3", "3/100ms", "1e999", "-1k", "inf", "1e", "+.5e+3Ki"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		check := func(name string, v float64, err error) {
			if err != nil {
				if !errors.Is(err, units.ErrSyntax) && !errors.Is(err, units.ErrRange) {
					t.Fatalf("%s(%q): %v wraps no sentinel", name, s, err)
				}
				return
			}
			if !(v > 0) || (math.IsInf(v, 1) && !strings.Contains(s, "n")) {
				t.Fatalf("%s(%q) = %v", name, s, v)
			}
		}
		r, err := units.ByteRate(s)
		check("ByteRate", r, err)
		r, err = units.JobRate(s)
		check("JobRate", r, err)
		n, err := units.Size(s)
		if err == nil && n < 0 {
			t.Fatalf("Size(%q) = %d", s, n)
		}
		if x, err := units.Number(s); err == nil && (math.IsInf(x, 0) || x != x) {
			t.Fatalf("Number(%q) = %v", s, x)
		}
	})
}

// TestSizeText: a size written in the largest binary unit that divides it,
// which Size reads back.
func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1 << 20: "1MiB", 3 << 19: "1536KiB", 256 << 20: "256MiB", 16 << 30: "16GiB"} {
		got := units.SizeText(n)
		if got != want {
			t.Errorf("SizeText(%d) = %q, want %q", n, got, want)
		}
		if back, err := units.Size(got); err != nil || back != n {
			t.Errorf("Size(%q) = %d, %v; want %d", got, back, err, n)
		}
	}
}
