package distributed

import (
	"strings"
	"testing"
)

// FuzzParseReply: whatever a server (or something pretending to be one)
// answers, parsing never panics and never yields negative counts or
// durations (overflowing µs saturate).
func FuzzParseReply(f *testing.F) {
	f.Add("25|100000|0|1100000|4|2|1000|1000|1780000000000000")
	f.Add("0|0|350000|0|3|1|+Inf|NaN|0")
	f.Add("1|2|3")
	f.Add("x|y|z|w|v|u|t|s")
	f.Fuzz(func(t *testing.T, s string) {
		v := strings.Split(s, "|")
		r, err := parseReply(v)
		if err != nil {
			return
		}
		if len(v) != 9 || r.granted < 0 || r.wait < 0 || r.ahead < 0 || r.validity < 0 || r.processes < 0 {
			t.Fatalf("accepted %q as %+v", v, r)
		}
	})
}
