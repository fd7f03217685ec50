package keyopt

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/throttle"
)

// TestAppendBounded: a part of MaxPart bytes is kept as it is; one byte
// more and it is replaced by its SHA-256 (base64url, unpadded), shorter
// than MaxPart itself.
func TestAppendBounded(t *testing.T) {
	kept := strings.Repeat("a", MaxPart)
	if got := string(AppendBounded([]byte("x:"), kept)); got != "x:"+kept {
		t.Errorf("%d bytes: got %q, want it kept", MaxPart, got)
	}
	got := string(AppendBounded([]byte("x:"), strings.Repeat("a", MaxPart+1)))
	// python3: base64.urlsafe_b64encode(hashlib.sha256(b'a'*65).digest()).rstrip(b'=')
	if want := "x:sha256:Y1NhxIu56rFBmOduqKt_GkFoXWrWKqkUbTAdTxfrCuA"; got != want {
		t.Errorf("%d bytes: got %q, want %q", MaxPart+1, got, want)
	}
	if n := len(got) - len("x:"); n > MaxPart {
		t.Errorf("a hashed part takes %d bytes, more than the %d it replaces", n, MaxPart)
	}
}

var errInvalid = errors.New("test: invalid option")

type part string

func checkPart(p part) string {
	if p == "" {
		return "empty part"
	}
	return ""
}

func TestCheck(t *testing.T) {
	store, err := throttle.NewMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := throttle.New(store, throttle.GCRA, throttle.PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	ok := New(errInvalid, lim, "default", part("ip"))
	ok.AddLimit("second", lim, nil)
	if err := ok.Check("limit name", checkPart); err != nil {
		t.Fatalf("valid configuration: %v", err)
	}
	if got := ok.Limits[1].Parts; len(got) != 1 || got[0] != "ip" {
		t.Errorf("a limit added without parts is keyed by %q, want the default part", got)
	}
	if ok.ClosedRetry != time.Second || ok.SetClosed || ok.FailOpen || ok.StoreTimeout != 0 {
		t.Errorf("defaults: closed retry %v, set closed %v, fail open %v", ok.ClosedRetry, ok.SetClosed, ok.FailOpen)
	}

	for _, tc := range []struct {
		name  string
		build func(c *Config[part])
		want  string
	}{
		{"bad name", func(c *Config[part]) { c.SetName("a:b") }, `limit name "a:b" must be`},
		{"long name", func(c *Config[part]) { c.SetName(strings.Repeat("n", 65)) }, "limit name"},
		{"same name", func(c *Config[part]) { c.AddLimit("default", c.Limits[0].Lim, nil) }, `two limits named "default"`},
		{"no parts", func(c *Config[part]) { c.SetKey(nil) }, "WithKey needs at least one part"},
		{"bad part", func(c *Config[part]) { c.SetKey([]part{""}) }, `limit "default": empty part`},
		{"nil limiter", func(c *Config[part]) { c.AddLimit("x", nil, nil) }, `nil limiter for limit "x"`},
		{"closed retry", func(c *Config[part]) { c.SetFailClosed(0, "Retry-After") }, "fail-closed Retry-After 0s must be positive"},
		{"open and closed", func(c *Config[part]) { c.FailOpen = true; c.SetFailClosed(time.Second, "x") }, "contradict"},
		{"store timeout", func(c *Config[part]) { c.SetStoreTimeout(-1) }, "store timeout -1ns must be positive"},
	} {
		c := New(errInvalid, lim, "default", part("ip"))
		tc.build(&c)
		err := c.Check("limit name", checkPart)
		if !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error wrapping %v containing %q", tc.name, err, errInvalid, tc.want)
		}
	}
	c := New(errInvalid, nil, "default", part("ip"))
	if err := c.Check("limit name", checkPart); !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), "nil limiter") {
		t.Errorf("New's nil limiter: got %v", err)
	}
}

type option interface{ apply(*Config[part]) }

type nameOption string

func (n nameOption) apply(c *Config[part]) { c.SetName(string(n)) }

// TestApply: options apply in order, and a nil one (a nil interface, as a
// caller's nil Option is) is an error rather than a panic.
func TestApply(t *testing.T) {
	c := New(errInvalid, nil, "default", part("ip"))
	Apply(&c, []option{nameOption("a"), nil, nameOption("b")}, func(o option) { o.apply(&c) })
	if c.Limits[0].Name != "b" {
		t.Errorf("name %q, want the last option's", c.Limits[0].Name)
	}
	err := c.Check("limit name", checkPart)
	if !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), "nil option") {
		t.Errorf("got %v, want a nil option error", err)
	}
}
