package distributed

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseReply: whatever a server (or something pretending to be one)
// answers, parsing never panics and never yields negative counts or
// durations (overflowing µs saturate). The input is the reply's elements
// separated by '|': those that read as integers are integer replies, the
// others bulk strings (the rate and the capacity are 8-byte packed
// doubles).
func FuzzParseReply(f *testing.F) {
	f.Add("25|100000|0|1100000|4|2|\x00\x00\x00\x00\x00\x40\x8f\x40|\x00\x00\x00\x00\x00\x40\x8f\x40|1780000000000000")
	f.Add("0|0|350000|0|3|1|\x00\x00\x00\x00\x00\x00\xf0\x7f|\x01\x00\x00\x00\x00\x00\xf8\x7f|0")
	f.Add("1|2|3")
	f.Add("x|y|z|w|v|u|t|s")
	f.Add(packDoubles(5, 1000, 2000, 101000, 3, 7, 1000, 1000, 1.78e15)) // hot.lua's packed form
	f.Fuzz(func(t *testing.T, s string) {
		// As hot.lua's packed reply, when it is one.
		if r, err := parseReply(s); err == nil {
			if len(s) != 72 || r.granted < 0 || r.wait < 0 || r.ahead < 0 || r.validity < 0 || r.processes < 0 || r.joined || r.refused {
				t.Fatalf("accepted the string %q as %+v", s, r)
			}
		}
		var v []any
		for _, e := range strings.Split(s, "|") {
			if n, err := strconv.ParseInt(e, 10, 64); err == nil {
				v = append(v, n)
			} else {
				v = append(v, e)
			}
		}
		r, err := parseReply(v)
		if err != nil {
			return
		}
		if len(v) != 9 && len(v) != 11 && !(len(v) == 12 && r.refused) || r.granted < 0 || r.wait < 0 || r.ahead < 0 || r.validity < 0 || r.processes < 0 {
			t.Fatalf("accepted %q as %+v", v, r)
		}
	})
}
