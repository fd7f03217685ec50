package rls

import (
	"encoding/json"
	"flag"
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

	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/rls"
)

// TestRLSDocs: the YAML of docs/rls.md is what it claims to be. The
// envoy.yaml decodes into Envoy's Bootstrap, every typed_config included,
// with no unknown field, and passes the protos' own validation; every
// configuration of ratelimit rls loads.
func TestRLSDocs(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile("../../../docs/rls.md")
	require.NoError(t, err)
	var envoy, configs, kube int
	for _, block := range codeBlocks(string(md), "yaml") {
		if strings.HasPrefix(block, "apiVersion:") {
			kube++
			checkKubernetes(t, block)
			continue
		}
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
	assert.Equal(t, 2, kube, "Envoy Gateway's configuration and Istio's deployment")
}

// checkKubernetes holds a Kubernetes object of the docs to what the docs
// say of it: a Deployment's container running /bin/ratelimit does so
// with no arguments, in an environment where that serves rls; Envoy
// Gateway's configuration names our image for its rate limit deployment.
func checkKubernetes(t *testing.T, block string) {
	t.Helper()
	var obj struct {
		Kind     string
		Provider struct {
			Kubernetes struct {
				RateLimitDeployment struct {
					Container struct {
						Image string
						Env   []struct{ Name, Value string }
					}
				} `yaml:"rateLimitDeployment"`
			}
		}
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Image   string
						Command []string
						Args    []string
						Env     []struct{ Name, Value string }
					}
				}
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(block), &obj), "%s", block)
	switch obj.Kind {
	case "EnvoyGateway":
		container := obj.Provider.Kubernetes.RateLimitDeployment.Container
		assert.Contains(t, container.Image, "ratelimit")
		// Each variable the example adds is one rls reads: set alone, it
		// changes the settings.
		for _, e := range container.Env {
			with, without := &rlsConfig{}, &rlsConfig{}
			for c, env := range map[*rlsConfig]map[string]string{with: {e.Name: e.Value}, without: nil} {
				fs := flag.NewFlagSet("rls", flag.ContinueOnError)
				rf := new(redisflag.Flags)
				c.register(fs, rf)
				require.NoError(t, c.settle(fs, rf, func(k string) (string, bool) { v, ok := env[k]; return v, ok }), "%s=%s", e.Name, e.Value)
			}
			assert.NotEqual(t, fmt.Sprintf("%+v", *without), fmt.Sprintf("%+v", *with), "%s=%s changes nothing", e.Name, e.Value)
		}
	case "Deployment":
		var ours int
		for _, c := range obj.Spec.Template.Spec.Containers {
			if len(c.Command) != 1 || c.Command[0] != "/bin/ratelimit" {
				continue
			}
			ours++
			assert.Empty(t, c.Args, "started with no arguments")
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			assert.True(t, ReferenceEnvironment(func(k string) (string, bool) { v, ok := env[k]; return v, ok }),
				"with no arguments in this environment, ratelimit prints its usage: %v", env)
		}
		assert.Equal(t, 1, ours, "one container runs /bin/ratelimit")
	default:
		t.Errorf("a %s in docs/rls.md: nothing checks it", obj.Kind)
	}
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

// TestRLSDocsFlags: every flag of ratelimit rls is in docs/rls.md, as
// `--name` (the flag table, or the section its table points to).
func TestRLSDocsFlags(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile("../../../docs/rls.md")
	require.NoError(t, err)
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	var rf redisflag.Flags
	(&rlsConfig{}).register(fs, &rf)
	fs.VisitAll(func(f *flag.Flag) {
		assert.Contains(t, string(md), "`--"+f.Name, "--%s is not in docs/rls.md", f.Name)
	})
}
