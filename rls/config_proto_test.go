package rls

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"gopkg.in/yaml.v2"
)

// Shorthands for the xDS configuration protos.
func pbConfig(name, domain string, ds ...*rlconfv3.RateLimitDescriptor) *rlconfv3.RateLimitConfig {
	return &rlconfv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
}

func pbDesc(key, value string, limit *rlconfv3.RateLimitPolicy, children ...*rlconfv3.RateLimitDescriptor) *rlconfv3.RateLimitDescriptor {
	return &rlconfv3.RateLimitDescriptor{Key: key, Value: value, RateLimit: limit, Descriptors: children}
}

func pbLimit(n uint32, unit rlconfv3.RateLimitUnit) *rlconfv3.RateLimitPolicy {
	return &rlconfv3.RateLimitPolicy{RequestsPerUnit: n, Unit: unit}
}

// envoyGatewayProto is a configuration as Envoy Gateway's translator writes
// it: name = domain = the listener, the route's name as key and value,
// rule-N-match-M below it (value = key for a header match, none for a
// distinct header), masked_remote_address with a CIDR, remote_address,
// the limit on the leaf, shadow_mode the only flag.
func envoyGatewayProto() *rlconfv3.RateLimitConfig {
	route := "httproute/default/backend/rule/0/match/0/www_example_com"
	shadow := pbDesc("rule-0-match-1", "", pbLimit(3, rlconfv3.RateLimitUnit_HOUR))
	shadow.ShadowMode = true
	return pbConfig("default/eg/http", "default/eg/http",
		pbDesc(route, route, nil,
			pbDesc("rule-0-match-0", "rule-0-match-0", pbLimit(2, rlconfv3.RateLimitUnit_MINUTE)),
			shadow,
			pbDesc("masked_remote_address", "0.0.0.0/0", nil,
				pbDesc("remote_address", "", pbLimit(10, rlconfv3.RateLimitUnit_MONTH))),
		))
}

// protoCases are RateLimitConfig resources with the reason the reference's
// loader gives for them ("" when it accepts them), named by the first
// resource's name.
var protoCases = []struct {
	name   string
	cfgs   []*rlconfv3.RateLimitConfig
	reason string
}{
	{"envoy gateway", []*rlconfv3.RateLimitConfig{envoyGatewayProto()}, ""},
	{"none", nil, ""},
	{"empty domain", []*rlconfv3.RateLimitConfig{pbConfig("a", "")}, "a: config file cannot have empty domain"},
	{"nil resource", []*rlconfv3.RateLimitConfig{nil}, ": config file cannot have empty domain"},
	{"empty key", []*rlconfv3.RateLimitConfig{pbConfig("a", "d", pbDesc("", "v", nil))}, "a: descriptor has empty key"},
	{"nil descriptor", []*rlconfv3.RateLimitConfig{pbConfig("a", "d", nil)}, "a: descriptor has empty key"},
	{"duplicate composite key", []*rlconfv3.RateLimitConfig{pbConfig("a", "d",
		pbDesc("k", "v", pbLimit(1, rlconfv3.RateLimitUnit_SECOND)),
		pbDesc("k", "v", pbLimit(2, rlconfv3.RateLimitUnit_SECOND)))},
		"a: duplicate descriptor composite key 'd.k_v'"},
	{"key_value against key and value", []*rlconfv3.RateLimitConfig{pbConfig("a", "d",
		pbDesc("a_b", "", pbLimit(1, rlconfv3.RateLimitUnit_SECOND)),
		pbDesc("a", "b", pbLimit(2, rlconfv3.RateLimitUnit_SECOND)))},
		"a: duplicate descriptor composite key 'd.a_b'"},
	{"no unit", []*rlconfv3.RateLimitConfig{pbConfig("a", "d", pbDesc("k", "", pbLimit(1, rlconfv3.RateLimitUnit_UNKNOWN)))},
		"a: invalid rate limit unit 'UNKNOWN'"},
	{"unit this proto does not know", []*rlconfv3.RateLimitConfig{pbConfig("a", "d", pbDesc("k", "", pbLimit(1, 42)))},
		"a: invalid rate limit unit '42'"},
	{"every unit", []*rlconfv3.RateLimitConfig{pbConfig("a", "d",
		pbDesc("s", "", pbLimit(1, rlconfv3.RateLimitUnit_SECOND)),
		pbDesc("m", "", pbLimit(1, rlconfv3.RateLimitUnit_MINUTE)),
		pbDesc("h", "", pbLimit(1, rlconfv3.RateLimitUnit_HOUR)),
		pbDesc("d", "", pbLimit(1, rlconfv3.RateLimitUnit_DAY)),
		pbDesc("w", "", pbLimit(1, rlconfv3.RateLimitUnit_WEEK)),
		pbDesc("mo", "", pbLimit(1, rlconfv3.RateLimitUnit_MONTH)),
		pbDesc("y", "", pbLimit(1, rlconfv3.RateLimitUnit_YEAR)))}, ""},
	{"unlimited with unit", []*rlconfv3.RateLimitConfig{pbConfig("a", "d",
		pbDesc("k", "", &rlconfv3.RateLimitPolicy{Unlimited: true, Unit: rlconfv3.RateLimitUnit_SECOND}))},
		"a: should not specify rate limit unit when unlimited"},
	{"unlimited", []*rlconfv3.RateLimitConfig{pbConfig("a", "d",
		pbDesc("k", "", &rlconfv3.RateLimitPolicy{Unlimited: true, Name: "u"}))}, ""},
	{"empty replaces", []*rlconfv3.RateLimitConfig{pbConfig("a", "d",
		pbDesc("k", "", &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_SECOND, Name: "n", Replaces: []*rlconfv3.RateLimitReplace{{}}}))},
		"a: should not have an empty replaces entry"},
	{"replaces itself", []*rlconfv3.RateLimitConfig{pbConfig("a", "d",
		pbDesc("k", "", &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_SECOND, Name: "n", Replaces: []*rlconfv3.RateLimitReplace{{Name: "n"}}}))},
		"a: replaces should not contain name of same descriptor"},
	{"replaces another", []*rlconfv3.RateLimitConfig{pbConfig("a", "d",
		pbDesc("k", "", &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_SECOND, Name: "n", Replaces: []*rlconfv3.RateLimitReplace{{Name: "o"}}}),
		pbDesc("j", "", &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_SECOND, Name: "o"}))}, ""},
	{"flags", []*rlconfv3.RateLimitConfig{pbConfig("a", "d",
		&rlconfv3.RateLimitDescriptor{Key: "k", Value: "v*", RateLimit: pbLimit(1, rlconfv3.RateLimitUnit_SECOND), ShadowMode: true, QuotaMode: true, DetailedMetric: true})}, ""},
	{"duplicate domain", []*rlconfv3.RateLimitConfig{pbConfig("a", "d"), pbConfig("b", "d")}, "b: duplicate domain 'd' in config file"},
	{"error in the second resource", []*rlconfv3.RateLimitConfig{envoyGatewayProto(), pbConfig("b", "e", pbDesc("", "", nil))}, "b: descriptor has empty key"},
}

func TestParseConfigProtos(t *testing.T) {
	for _, c := range protoCases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfigProtos(c.cfgs)
			if c.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(cfg.Domains()) != len(c.cfgs) {
					t.Errorf("domains %v from %d resources", cfg.Domains(), len(c.cfgs))
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || err.Error() != c.reason {
				t.Fatalf("got %v (%T), want *ConfigError %q", err, err, c.reason)
			}
		})
	}
}

// The protos go through the YAML loader's checks: each case loads to the
// same configuration, or is refused with the same error, as the same
// content written as YAML files (what the reference's
// ConfigXdsProtoToYaml amounts to).
func TestParseConfigProtosAsYAML(t *testing.T) {
	for _, c := range protoCases {
		for _, merge := range []bool{false, true} {
			var files []File
			for _, p := range c.cfgs {
				files = append(files, File{Name: p.GetName(), Content: protoYAML(t, p)})
			}
			fromProto, errProto := ParseConfigProtos(c.cfgs, MergeDomains(merge))
			fromYAML, errYAML := ParseConfig(files, MergeDomains(merge))
			if (errProto == nil) != (errYAML == nil) || (errProto != nil && errProto.Error() != errYAML.Error()) {
				t.Errorf("%s (merge %v): protos: %v; YAML: %v", c.name, merge, errProto, errYAML)
				continue
			}
			if errProto == nil && !reflect.DeepEqual(fromProto, fromYAML) {
				t.Errorf("%s (merge %v): the protos' configuration differs from the YAML's", c.name, merge)
			}
		}
	}
}

// protoYAML writes a RateLimitConfig as the YAML file with the same
// content.
func protoYAML(t *testing.T, p *rlconfv3.RateLimitConfig) []byte {
	t.Helper()
	root := yaml.MapSlice{{Key: "domain", Value: p.GetDomain()}}
	if ds := p.GetDescriptors(); len(ds) > 0 {
		root = append(root, yaml.MapItem{Key: "descriptors", Value: yamlDescriptors(ds)})
	}
	b, err := yaml.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func yamlDescriptors(ds []*rlconfv3.RateLimitDescriptor) []yaml.MapSlice {
	var out []yaml.MapSlice
	for _, d := range ds {
		m := yaml.MapSlice{{Key: "key", Value: d.GetKey()}}
		if d.GetValue() != "" {
			m = append(m, yaml.MapItem{Key: "value", Value: d.GetValue()})
		}
		if l := d.GetRateLimit(); l != nil {
			rl := yaml.MapSlice{
				{Key: "unit", Value: l.GetUnit().String()},
				{Key: "requests_per_unit", Value: l.GetRequestsPerUnit()},
				{Key: "unlimited", Value: l.GetUnlimited()},
				{Key: "name", Value: l.GetName()},
			}
			var replaces []yaml.MapSlice
			for _, r := range l.GetReplaces() {
				replaces = append(replaces, yaml.MapSlice{{Key: "name", Value: r.GetName()}})
			}
			if replaces != nil {
				rl = append(rl, yaml.MapItem{Key: "replaces", Value: replaces})
			}
			m = append(m, yaml.MapItem{Key: "rate_limit", Value: rl})
		}
		if sub := d.GetDescriptors(); len(sub) > 0 {
			m = append(m, yaml.MapItem{Key: "descriptors", Value: yamlDescriptors(sub)})
		}
		m = append(m,
			yaml.MapItem{Key: "shadow_mode", Value: d.GetShadowMode()},
			yaml.MapItem{Key: "quota_mode", Value: d.GetQuotaMode()},
			yaml.MapItem{Key: "detailed_metric", Value: d.GetDetailedMetric()})
		out = append(out, m)
	}
	return out
}

func TestParseConfigProtosMerge(t *testing.T) {
	a := pbConfig("a", "d", pbDesc("k1", "", pbLimit(1, rlconfv3.RateLimitUnit_SECOND)))
	b := pbConfig("b", "d", pbDesc("k2", "", pbLimit(2, rlconfv3.RateLimitUnit_SECOND)))
	cfg, err := ParseConfigProtos([]*rlconfv3.RateLimitConfig{a, b}, MergeDomains(true))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k2"} {
		if cfg.domains["d"].children[k] == nil {
			t.Errorf("merged domain lacks %s", k)
		}
	}
	if got := cfg.Files(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("Files() = %q, want the resources' names", got)
	}
}

// A configuration from Envoy Gateway's protos answers as its translator
// means: the limits on the leaves, a month unit, shadow mode.
func TestParseConfigProtosAnswers(t *testing.T) {
	cfg, err := ParseConfigProtos([]*rlconfv3.RateLimitConfig{envoyGatewayProto()})
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewMemoryStore(WithStoreClock(newTestClock(T0)))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	route := "httproute/default/backend/rule/0/match/0/www_example_com"
	// T0 is 2 240 000 s into a 30-day month.
	const monthReset = 30*86400 - 2_240_000
	for i, want := range []*rlsv3.RateLimitResponse{
		response(ok, status(ok, "", 2, mnt, 1, 40), status(ok, "", 10, mon, 9, monthReset), status(ok, "", 3, hr, 2, 2800)),
		response(ok, status(ok, "", 2, mnt, 0, 40), status(ok, "", 10, mon, 8, monthReset), status(ok, "", 3, hr, 1, 2800)),
		response(over, status(over, "", 2, mnt, 0, 40), status(ok, "", 10, mon, 7, monthReset), status(ok, "", 3, hr, 0, 2800)),
		// The shadow-mode rule is over, and answers OK.
		response(over, status(over, "", 2, mnt, 0, 40), status(ok, "", 10, mon, 6, monthReset), status(ok, "", 3, hr, 0, 2800)),
	} {
		got, err := svc.ShouldRateLimit(context.Background(), request("default/eg/http", 0,
			desc(route, route, "rule-0-match-0", "rule-0-match-0"),
			desc(route, route, "masked_remote_address", "0.0.0.0/0", "remote_address", "192.0.2.1"),
			desc(route, route, "rule-0-match-1", "x"),
		))
		if err != nil {
			t.Fatal(err)
		}
		checkResponse(t, fmt.Sprintf("call %d", i+1), got, want)
	}
	if c := svc.RuleCounts("default/eg/http." + route + "_" + route + ".rule-0-match-1"); c.ShadowMode != 1 {
		t.Errorf("shadow-mode counts %+v, want one shadow_mode hit", c)
	}
}
