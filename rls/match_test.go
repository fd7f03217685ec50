package rls

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMatchReference replays testdata/match/reference.txt: the reference's
// GetLimit on testdata/match/match.yaml for random descriptors (the rule's
// limit, name, metric key and share_threshold patterns, or no limit).
func TestMatchReference(t *testing.T) {
	cfg := mustLoad(t, "testdata/match/match.yaml")
	f, err := os.Open("testdata/match/reference.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		in, want, _ := strings.Cut(line, "\t")
		var kv []string
		for _, e := range strings.Split(in, ",") {
			k, v, _ := strings.Cut(e, "=")
			kv = append(kv, k, v)
		}
		m, _ := cfg.find("m", desc(kv...))
		got := "-"
		if m.rule != nil {
			l := m.rule.Limits[0]
			got = fmt.Sprintf("%d %s %q %s", l.RequestsPerUnit, l.Unit, l.Name, m.statsKey)
			if m.shared != nil {
				got += " share=" + strings.Join(m.shared, "|")
			}
		}
		if got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
		n++
	}
	if n < 500 {
		t.Fatalf("only %d vectors", n)
	}
}
