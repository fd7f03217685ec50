package docstest

import (
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlqv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestBlocks(t *testing.T) {
	md := "text\n```yaml\na: 1\n```\n```sh\nls\n```\n```yaml\nb: [x]\n```\n"
	got := Blocks(md, "yaml")
	if len(got) != 2 || got[0] != "a: 1\n" || got[1] != "b: [x]\n" {
		t.Fatalf("%q", got)
	}
	if at := BlocksAt(md, "yaml"); len(at) != 2 || at[0].Line != 3 || at[1].Line != 9 {
		t.Fatalf("BlocksAt: %+v, want lines 3 and 9", at)
	}
	j, err := JSON("a: {1: [x, {b: 2}]}")
	if err != nil || string(j) != `{"a":{"1":["x",{"b":2}]}}` {
		t.Fatalf("%s %v", j, err)
	}
}

// TestValidateDeep: a rule broken inside an Any (Envoy's typed_config) is
// found, which ValidateAll alone does not do.
func TestValidateDeep(t *testing.T) {
	bad := &rlqv3.RateLimitQuotaBucketSettings{ReportingInterval: durationpb.New(10 * time.Millisecond)}
	packed, err := anypb.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	outer := &corev3.TypedExtensionConfig{Name: "x", TypedConfig: packed}
	if err := outer.ValidateAll(); err != nil {
		t.Fatalf("ValidateAll looked inside: %v", err)
	}
	if err := ValidateDeep(outer); err == nil || !strings.Contains(err.Error(), "ReportingInterval") {
		t.Fatalf("ValidateDeep: %v", err)
	}
	good := &rlqv3.RateLimitQuotaBucketSettings{ReportingInterval: durationpb.New(time.Second)}
	packed, _ = anypb.New(good)
	if err := ValidateDeep(&corev3.TypedExtensionConfig{Name: "x", TypedConfig: packed}); err != nil {
		t.Fatal(err)
	}
}
