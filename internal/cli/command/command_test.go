package command

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// newTestFlagSet has one flag like trace's, to test the parsing loop alone.
func newTestFlagSet() (*flag.FlagSet, flag.Value) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Float64("qps", 4, "")
	return fs, fs.Lookup("qps").Value
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		words string
		qps   string
	}{
		{[]string{"acquire:1", "--qps", "2", "sleep:1s"}, "acquire:1 sleep:1s", "2"},
		{[]string{"--qps=3", "acquire:1"}, "acquire:1", "3"},
		{[]string{"acquire:1", "--", "--qps", "5"}, "acquire:1 --qps 5", "4"},
		{[]string{"acquire:1", "sleep:1s", "-qps", "7"}, "acquire:1 sleep:1s", "7"},
	} {
		fs, qps := newTestFlagSet()
		words, err := ParseInterspersed(fs, tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got := strings.Join(words, " "); got != tc.words || qps.String() != tc.qps {
			t.Errorf("%v: words %q, qps %s; want %q, %s", tc.args, got, qps, tc.words, tc.qps)
		}
	}
}

// TestSize: a size flag reads units.Size's sizes, refuses what is outside
// its bounds with the bounds in its units, and prints its default as read.
func TestSize(t *testing.T) {
	n := int64(32 << 10)
	v := Size{P: &n, Min: 1 << 10, Max: 1 << 30}
	if v.String() != "32KiB" {
		t.Errorf("default %q, want 32KiB", v.String())
	}
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"64KiB", 64 << 10, ""},
		{"1000", 1000 << 0, "want between 1KiB and 1GiB"},
		{"1.5MiB", 3 << 19, ""},
		{"2GiB", 0, "want between 1KiB and 1GiB"},
		{"1x", 0, `"1x"`},
		{"-1KiB", 0, "negative"},
	} {
		err := v.Set(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && n != tc.want:
			t.Errorf("%q: %d, want %d", tc.in, n, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one with %q", tc.in, err, tc.err)
		}
	}
}
