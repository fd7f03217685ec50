package rls

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseConfig: any file is loaded or refused with a one-line
// *ConfigError, never a panic; a loaded one answers any descriptor.
func FuzzParseConfig(f *testing.F) {
	for _, dir := range []string{"testdata/config", "testdata/validate", "testdata/match"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, "k", "v")
		}
	}
	f.Fuzz(func(t *testing.T, content []byte, key, value string) {
		cfg, err := ParseConfig([]File{{Name: "f.yaml", Content: content}})
		if err != nil {
			if _, ok := err.(*ConfigError); !ok {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		svc, err := New(cfg, nil, WithIETFHeaders(), WithRateLimitHeaders("", "", ""))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range cfg.Domains() {
			for _, req := range [][]string{{key, value}, {key, value, key, value}, {"key1", value}, {key, "value1", "subkey1", value}} {
				if _, err := svc.ShouldRateLimit(context.Background(), request(d, 0, desc(req...))); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
