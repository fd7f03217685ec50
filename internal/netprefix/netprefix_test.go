package netprefix

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.0/8":          "10.0.0.0/8",
		"10.1.2.3/8":          "10.0.0.0/8",
		"192.0.2.7":           "192.0.2.7/32",
		"2001:db8::/32":       "2001:db8::/32",
		"::ffff:10.0.0.0/104": "10.0.0.0/8",
		"::ffff:192.0.2.7":    "192.0.2.7/32",
		"fe80::1%eth0":        "fe80::1/128",
	} {
		p, err := Parse(in)
		if err != nil || p.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "10.0.0.0/33", "proxy.local", "::ffff:10.0.0.0/95", "10.0.0.0/"} {
		if p, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, p)
		}
	}
}
