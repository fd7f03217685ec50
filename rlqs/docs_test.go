package rlqs

import (
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/smoothrate/ratelimit/internal/docstest"
)

// TestDocs: the YAML of docs/rlqs.md is what it claims to be. The
// envoy.yaml decodes into Envoy's Bootstrap, every typed_config included
// (the rate_limit_quota filter, its matchers and bucket settings), with no
// unknown field, and passes the protos' own validation, typed_config
// included; the file example loads.
func TestDocs(t *testing.T) {
	md, err := os.ReadFile("../docs/rlqs.md")
	if err != nil {
		t.Fatal(err)
	}
	var envoy, files int
	for _, block := range docstest.Blocks(string(md), "yaml") {
		if strings.Contains(block, "static_resources:") {
			envoy++
			j, err := docstest.JSON(block)
			if err != nil {
				t.Fatal(err)
			}
			var b bootstrapv3.Bootstrap
			if err := protojson.Unmarshal(j, &b); err != nil {
				t.Fatalf("envoy.yaml: %v", err)
			}
			if err := docstest.ValidateDeep(&b); err != nil {
				t.Fatalf("envoy.yaml: %v", err)
			}
			continue
		}
		files++
		if _, err := ParseConfig("docs/rlqs.md", []byte(block)); err != nil {
			t.Errorf("%v\n%s", err, block)
		}
	}
	if envoy != 1 || files < 1 {
		t.Errorf("%d envoy.yaml, %d files", envoy, files)
	}
}
