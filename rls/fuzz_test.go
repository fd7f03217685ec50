package rls

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
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

// FuzzParseConfigProtos: any RateLimitConfig resource is loaded or refused
// with a *ConfigError, never a panic, and a loaded one makes a Service.
func FuzzParseConfigProtos(f *testing.F) {
	for _, c := range protoCases {
		for _, p := range c.cfgs {
			b, err := proto.Marshal(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p rlconfv3.RateLimitConfig
		if proto.Unmarshal(b, &p) != nil {
			return
		}
		cfg, err := ParseConfigProtos([]*rlconfv3.RateLimitConfig{&p})
		if err != nil {
			if _, ok := err.(*ConfigError); !ok {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		if _, err := New(cfg, nil); err != nil {
			t.Fatal(err)
		}
	})
}
