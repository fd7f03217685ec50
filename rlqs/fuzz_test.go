package rlqs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseConfig: any file is loaded or refused with a one-line
// *ConfigError naming it, never a panic; in a loaded one, every entry's
// own bucket id (a value for each "*") matches an entry at least as
// specific, and ids with other keys match none.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "config", "*.yaml"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "v")
	}
	f.Fuzz(func(t *testing.T, content []byte, value string) {
		c, err := ParseConfig("f.yaml", content)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != "f.yaml" || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%T %q", err, err)
			}
			return
		}
		if c.Domain() == "" {
			t.Fatal("empty domain loaded")
		}
		for _, r := range c.rules {
			id := map[string]string{}
			for k, v := range r.keys {
				if v == "*" {
					v = value
				}
				id[k] = v
			}
			m := c.match(id)
			if m == nil || m.wildcards > r.wildcards {
				t.Fatalf("entry %d's id %v matched %+v", r.index+1, id, m)
			}
			if r.limited && (r.rate() < 0 || r.unitSeconds == 0) || r.ttl <= r.reportingInterval {
				t.Fatalf("entry %d: %+v", r.index+1, r)
			}
			id["\x00other"] = value
			if m := c.match(id); m != nil && len(m.keys) != len(id) {
				t.Fatalf("%v matched entry %d with other keys", id, m.index+1)
			}
		}
	})
}
