package jobs_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	} {
		got, err := jobs.ParseRate(tc.in)
		require.NoError(t, err, tc.in)
		assert.InDelta(t, tc.want, got, 1e-12*tc.want, tc.in)
	}
	for _, in := range []string{"inf", "unlimited"} {
		got, err := jobs.ParseRate(in)
		require.NoError(t, err, in)
		assert.True(t, math.IsInf(got, 1), "%s = %v", in, got)
	}
	for _, in := range []string{"", "0", "-1/s", "five", "5/", "5/y", "5/0s", "5/-1s", "NaN", "1e999", "0x10", "5/s/s"} {
		_, err := jobs.ParseRate(in)
		assert.ErrorIs(t, err, jobs.ErrInvalidRate, in)
	}
}
