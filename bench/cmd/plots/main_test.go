package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smoothrate/ratelimit/smooth"
)

// The committed figures must be what the program draws today: a change to
// the engine that moves a curve must come with regenerated plots
// (cd bench && go run ./cmd/plots).
func TestCommittedPlotsAreCurrent(t *testing.T) {
	dir := t.TempDir()
	if err := writeAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"warmup-curve.svg", "cold-start.svg"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		checkSVG(t, name, got)
		committed, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", name))
		if err != nil {
			t.Fatalf("docs/%s: %v", name, err)
		}
		if !bytes.Equal(got, committed) {
			t.Errorf("docs/%s is stale: run go run ./cmd/plots in bench/", name)
		}
	}
}

// checkSVG parses the file as XML and checks that it has the parts a reader
// needs: a title, axis labels and at least one line.
func checkSVG(t *testing.T, name string, data []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var texts []string
	lines := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", name, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "polyline" {
				lines++
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	if lines == 0 {
		t.Errorf("%s has no lines", name)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"permits", "cold factor"} {
		if !strings.Contains(all, want) {
			t.Errorf("%s: no text mentions %q", name, want)
		}
	}
}

// The closed form used for the curve must agree with the engine's own
// prices, including for a permit that straddles the threshold.
func TestThrottlingAreaMatchesEngine(t *testing.T) {
	for _, cold := range []float64{1, 3, 10} {
		e := smooth.NewWarmingUp(smooth.Nanosecond, 2e9, cold, 4, 0)
		if got := throttlingArea(&e, e.ThresholdPermits(), e.MaxPermits()); got < 2-1e-9 || got > 2+1e-9 {
			t.Errorf("cold factor %g: trapezoid area %v s, want the 2 s warm-up", cold, got)
		}
		for e.StoredPermits() >= 1 {
			s := e.StoredPermits()
			before := e.NextFreeTicket()
			e.Reserve(1, 0)
			got := float64(e.NextFreeTicket()-before) / 1e9
			if want := throttlingArea(&e, s-1, s); got < want-2e-9 || got > want+2e-9 {
				t.Errorf("cold factor %g, permit [%v, %v]: engine %v s, closed form %v s", cold, s-1, s, got, want)
			}
		}
	}
}

func TestStepPoints(t *testing.T) {
	got := stepPoints([][2]float64{{0, 1}, {1, 3}, {2, 2}})
	want := [][2]float64{{0, 1}, {1, 1}, {1, 3}, {2, 3}, {2, 2}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}
