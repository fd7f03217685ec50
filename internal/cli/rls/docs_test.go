package rls

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v2"

	"github.com/smoothrate/ratelimit/rls"
)

// TestRLSDocs: the YAML of docs/rls.md is what it claims to be. The
// envoy.yaml decodes into Envoy's Bootstrap, every typed_config included,
// with no unknown field, and passes the protos' own validation; every
// configuration of ratelimit rls loads.
func TestRLSDocs(t *testing.T) {
	md, err := os.ReadFile("../../../docs/rls.md")
	require.NoError(t, err)
	var envoy, configs int
	for _, block := range codeBlocks(string(md), "yaml") {
		if strings.Contains(block, "static_resources:") {
			envoy++
			var v any
			require.NoError(t, yaml.Unmarshal([]byte(block), &v))
			j, err := json.Marshal(jsonable(v))
			require.NoError(t, err)
			var b bootstrapv3.Bootstrap
			require.NoError(t, protojson.Unmarshal(j, &b), "envoy.yaml")
			require.NoError(t, b.ValidateAll(), "envoy.yaml")
			continue
		}
		configs++
		_, err := rls.ParseConfig([]rls.File{{Name: "docs", Content: []byte(block)}})
		assert.NoError(t, err, "%s", block)
	}
	assert.Equal(t, 1, envoy, "one envoy.yaml")
	assert.GreaterOrEqual(t, configs, 3, "the configuration examples")
}

// codeBlocks returns the contents of the fenced blocks of language lang.
func codeBlocks(md, lang string) []string {
	var out []string
	for rest := md; ; {
		_, after, ok := strings.Cut(rest, "```"+lang+"\n")
		if !ok {
			return out
		}
		block, tail, _ := strings.Cut(after, "```")
		out = append(out, block)
		rest = tail
	}
}

// jsonable turns yaml.v2's maps (interface keys) into JSON's.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[fmt.Sprint(k)] = jsonable(x)
		}
		return m
	case []any:
		for i := range v {
			v[i] = jsonable(v[i])
		}
	}
	return v
}
