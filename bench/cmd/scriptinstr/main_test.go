package main

import (
	"strings"
	"testing"
)

func TestTotals(t *testing.T) {
	for _, c := range []struct {
		dump string
		want int64
	}{
		// callgrind 3.19 writes "summary:"; older ones "totals:" only.
		{"# callgrind format\nevents: Ir\nsummary: 88887777\nfl=(1)\n0 3\ntotals: 88887777\n", 88887777},
		{"events: Ir\nfn=(1) main\n16 5\ntotals: 1234\n", 1234},
	} {
		got, err := totals(strings.NewReader(c.dump))
		if err != nil || got != c.want {
			t.Errorf("totals(%q) = %d, %v; want %d", c.dump, got, err, c.want)
		}
	}
	if _, err := totals(strings.NewReader("events: Ir\n")); err == nil {
		t.Error("a dump without totals gave no error")
	}
}

func TestServerVersion(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n"
	if got := serverVersion(info); got != "redis-server 7.0.15" {
		t.Errorf("serverVersion = %q", got)
	}
}
