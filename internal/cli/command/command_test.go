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
