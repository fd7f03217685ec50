package rlqs

import (
	"flag"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/docstest"
	librlqs "github.com/smoothrate/ratelimit/rlqs"
)

// TestRLQSDocs: docs/rlqs.md says what the command does. Its table of
// flags has every flag, with the flag's default where it has one; its
// envoy.yaml's rlqs cluster points at the default --grpc port, and its
// filter's domain is the file example's.
func TestRLQSDocs(t *testing.T) {
	b, err := os.ReadFile("../../../docs/rlqs.md")
	require.NoError(t, err)
	md := string(b)

	rows := map[string]string{} // flag name → its default column
	flagName := regexp.MustCompile("^ `--([a-z-]+)[^`]*` $")
	for line := range strings.Lines(md) {
		cols := strings.Split(line, "|")
		if len(cols) < 4 {
			continue
		}
		if m := flagName.FindStringSubmatch(cols[1]); m != nil {
			rows[m[1]] = strings.TrimSpace(cols[2])
		}
	}
	var c rlqsConfig
	var rf redisflag.Flags
	c.flags(&rf).VisitAll(func(f *flag.Flag) {
		def, ok := rows[f.Name]
		if !assert.True(t, ok, "--%s is not in docs/rlqs.md's table of flags", f.Name) {
			return
		}
		if f.DefValue != "" && f.DefValue != "false" {
			assert.Equal(t, "`"+f.DefValue+"`", def, "--%s's default", f.Name)
		}
		delete(rows, f.Name)
	})
	assert.Empty(t, rows, "flags in the docs that the command does not have")

	var envoy *bootstrapv3.Bootstrap
	var domains []string
	for _, block := range docstest.Blocks(md, "yaml") {
		if !strings.Contains(block, "static_resources:") {
			cfg, err := librlqs.ParseConfig("docs", []byte(block))
			require.NoError(t, err)
			domains = append(domains, cfg.Domain())
			continue
		}
		j, err := docstest.JSON(block)
		require.NoError(t, err)
		envoy = &bootstrapv3.Bootstrap{}
		require.NoError(t, protojson.Unmarshal(j, envoy))
	}
	require.NotNil(t, envoy, "docs/rlqs.md has an envoy.yaml")
	require.NotEmpty(t, domains)

	var port uint32
	for _, cl := range envoy.GetStaticResources().GetClusters() {
		if cl.GetName() == "rlqs" {
			port = cl.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
		}
	}
	assert.Equal(t, defaultGRPC, ":"+strconv.FormatUint(uint64(port), 10), "the envoy.yaml's rlqs cluster and --grpc's default")

	var filterDomain string
	for _, l := range envoy.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if nf.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					var q rlqsfilterv3.RateLimitQuotaFilterConfig
					if hf.GetTypedConfig().UnmarshalTo(&q) == nil {
						filterDomain = q.GetDomain()
						assert.Equal(t, "rlqs", q.GetRlqsServer().GetEnvoyGrpc().GetClusterName())
					}
				}
			}
		}
	}
	assert.Contains(t, domains, filterDomain, "the filter's domain is the file's")
}
