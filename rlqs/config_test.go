package rlqs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mustConfig(t testing.TB, content string) *Config {
	t.Helper()
	c, err := ParseConfig("test.yaml", []byte(content))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestExampleConfig: the smallest file shape (a domain, buckets with exact
// and "*" values, a limit per unit) loads, with its defaults.
func TestExampleConfig(t *testing.T) {
	c, err := LoadConfig(filepath.Join("testdata", "config", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Domain() != "edge" || c.BlanketRule() != AllowAll || c.Buckets() != 2 {
		t.Fatalf("domain %q blanket %v buckets %d", c.Domain(), c.BlanketRule(), c.Buckets())
	}
	api := c.match(map[string]string{"route": "api"})
	if api == nil || !api.limited || api.rate() != 100 || api.unit != "second" {
		t.Fatalf("route api: %+v", api)
	}
	if api.reportingInterval != time.Second || api.ttl != 3*time.Second || api.burst != DefaultBurst || api.abandonAfter != time.Minute {
		t.Errorf("defaults: %+v", api)
	}
	login := c.match(map[string]string{"user": "bob", "route": "login"})
	if login == nil || login.rate() != 5.0/60 {
		t.Fatalf("route login: %+v", login)
	}
	for _, id := range []map[string]string{
		{"route": "other"},
		{"route": "api", "user": "x"}, // not exactly the entry's keys
		{"route": "login"},
		{},
	} {
		if r := c.match(id); r != nil {
			t.Errorf("%v matched entry %d", id, r.index+1)
		}
	}
}

func TestFullConfig(t *testing.T) {
	c, err := LoadConfig(filepath.Join("testdata", "config", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.BlanketRule() != DenyAll {
		t.Errorf("blanket %v", c.BlanketRule())
	}
	for _, tc := range []struct {
		id    map[string]string
		entry int // 1-based; 0: none
	}{
		{map[string]string{"route": "api"}, 1},
		{map[string]string{"tenant": "small", "route": "api"}, 2},
		// The entry with fewer "*" wins, wherever it is in the file.
		{map[string]string{"tenant": "big", "route": "api"}, 3},
		{map[string]string{"route": "reports"}, 4},
		{map[string]string{"route": "health"}, 6},
		{map[string]string{"route": "admin"}, 7},
	} {
		r := c.match(tc.id)
		if r == nil || r.index+1 != tc.entry {
			t.Errorf("%v matched %+v, want entry %d", tc.id, r, tc.entry)
		}
	}
	r := c.match(map[string]string{"route": "reports"})
	if r.reportingInterval != 10*time.Second || r.ttl != 30*time.Second || r.abandonAfter != 10*time.Minute || r.burst != 100*time.Millisecond {
		t.Errorf("per-entry durations: %+v", r)
	}
	r = c.match(map[string]string{"route": "api", "tenant": "t"})
	if r.burst != time.Second || r.ttl != 7*time.Second || r.reportingInterval != 2*time.Second {
		t.Errorf("file durations with an entry's burst: %+v", r)
	}
	if r := c.match(map[string]string{"route": "health"}); r.limited || r.blanket != AllowAll {
		t.Errorf("blanket entry: %+v", r)
	}
	if r := c.match(map[string]string{"route": "admin"}); !r.limited || r.rate() != 0 {
		t.Errorf("zero entry: %+v", r)
	}
}

// TestTTLFollowsTheEntrysInterval: without an assignment_ttl anywhere, an
// entry's own reporting_interval sets its TTL (three intervals, whole
// seconds).
func TestTTLFollowsTheEntrysInterval(t *testing.T) {
	c := mustConfig(t, `
domain: d
reporting_interval: 500ms
buckets:
  - bucket_id: {a: "1"}
    requests_per_unit: 1
    unit: second
  - bucket_id: {a: "2"}
    requests_per_unit: 1
    unit: second
    reporting_interval: 5s
`)
	if r := c.match(map[string]string{"a": "1"}); r.ttl != 2*time.Second {
		t.Errorf("500ms interval: ttl %v, want 2s", r.ttl)
	}
	if r := c.match(map[string]string{"a": "2"}); r.ttl != 15*time.Second {
		t.Errorf("5s interval: ttl %v, want 15s", r.ttl)
	}
}

func TestConfigErrors(t *testing.T) {
	const entry = "\n  - bucket_id: {route: api}\n    requests_per_unit: 1\n    unit: second"
	for _, tc := range []struct {
		content, reason string
	}{
		{"", "domain is missing"},
		{"domain: ''", "domain must not be empty"},
		{"domain: [a]", "domain must be a string"},
		{"- a\n- b", "invalid YAML: yaml: unmarshal errors:"},
		{"domain: d\ndomain: e", "key 'domain' appears twice"},
		{"domain: d\nbukets: []", "unknown key 'bukets'"},
		{"domain: d\nblanket_rule: maybe", "blanket_rule 'maybe' is not allow_all or deny_all"},
		{"domain: d\nbuckets: {a: b}", "buckets must be a list"},
		{"domain: d\nbuckets: [a]", "buckets[1]: an entry must be a map"},
		{"domain: d\nbuckets:\n  - requests_per_unit: 1\n    unit: second", "buckets[1]: bucket_id is missing"},
		{"domain: d\nbuckets:\n  - bucket_id: {}\n    requests_per_unit: 1\n    unit: second", "buckets[1]: bucket_id must be a map of at least one key"},
		{"domain: d\nbuckets:\n  - bucket_id: {code: 404}\n    requests_per_unit: 1\n    unit: second", "bucket_id value of 'code' is 404, not a string: quote it"},
		{"domain: d\nbuckets:\n  - bucket_id: {route: api}", "buckets[1]: requests_per_unit (with unit) or blanket_rule is missing"},
		{"domain: d\nbuckets:\n  - bucket_id: {route: api}\n    requests_per_unit: 1", "unit is missing"},
		{"domain: d\nbuckets:\n  - bucket_id: {route: api}\n    unit: second", "requests_per_unit is missing"},
		{"domain: d\nbuckets:\n  - bucket_id: {route: api}\n    requests_per_unit: 1\n    unit: fortnight", "unit 'fortnight' is not second, minute, hour or day"},
		{"domain: d\nbuckets:\n  - bucket_id: {route: api}\n    requests_per_unit: -1\n    unit: second", "requests_per_unit -1 must be between 0 and"},
		{"domain: d\nbuckets:\n  - bucket_id: {route: api}\n    requests_per_unit: 1.5\n    unit: second", "requests_per_unit must be a whole number"},
		{"domain: d\nbuckets:\n  - bucket_id: {route: api}\n    blanket_rule: deny_all\n    requests_per_unit: 1\n    unit: second", "either blanket_rule or requests_per_unit and unit, not both"},
		{"domain: d\nbuckets:" + entry + "\n    colour: red", "buckets[1]: unknown key 'colour'"},
		{"domain: d\nbuckets:" + entry + entry, "buckets[2]: bucket_id {route: api} is also buckets[1]'s"},
		{"domain: d\nreporting_interval: 1", "reporting_interval must be a duration such as 1s or 250ms, not 1"},
		{"domain: d\nreporting_interval: soon", "reporting_interval 'soon' is not a duration"},
		{"domain: d\nreporting_interval: 10ms", "reporting_interval 10ms is below Envoy's least, 100ms"},
		{"domain: d\nassignment_ttl: 1500ms", "assignment_ttl 1.5s is not a whole number of seconds"},
		{"domain: d\nassignment_ttl: 1s", "assignment_ttl 1s must be longer than reporting_interval 1s"},
		{"domain: d\nassignment_ttl: 0s", "assignment_ttl 0s must be positive"},
		{"domain: d\nburst: -1s", "burst -1s must be positive"},
		{"domain: d\nabandon_after: 2s", "abandon_after 2s must be at least assignment_ttl 3s"},
		{"domain: d\nassignment_ttl: 5s\nbuckets:" + entry + "\n    reporting_interval: 10s", "buckets[1]: assignment_ttl 5s must be longer than reporting_interval 10s"},
		{"domain: d\nbuckets:\n  - bucket_id: {" + manyKeys(33) + "}\n    blanket_rule: deny_all", "bucket_id has more than 32 keys or 4096 bytes"},
		{"domain: d\nbuckets:\n  - bucket_id:\n      k: " + strings.Repeat("v", 5000) + "\n    blanket_rule: deny_all", "bucket_id has more than 32 keys or 4096 bytes"},
	} {
		_, err := ParseConfig("f.yaml", []byte(tc.content))
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%q: %v, want a *ConfigError", tc.content, err)
			continue
		}
		if ce.File != "f.yaml" || !strings.Contains(ce.Reason, tc.reason) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q:\n got %q\nwant f.yaml: ...%s...", tc.content, err, tc.reason)
		}
		if !strings.HasPrefix(err.Error(), "f.yaml: ") {
			t.Errorf("%q: %q does not begin with the file", tc.content, err)
		}
	}
}

// TestAliasBomb: a file whose aliases expand exponentially (a "billion
// laughs") is refused, quickly, instead of exhausting memory.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		b.WriteString("a" + itoa(i) + ": &a" + itoa(i) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + itoa(i-1))
		}
		b.WriteString("]\n")
	}
	start := time.Now()
	_, err := ParseConfig("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Fatalf("err = %v, want excessive aliasing", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusing the bomb took %v", d)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func manyKeys(n int) string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + itoa(i) + ": v"
	}
	return strings.Join(keys, ", ")
}

func TestLoadConfigMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "none.yaml")
	_, err := LoadConfig(p)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.File != p || !errors.Is(err, err) {
		t.Fatalf("%v", err)
	}
	if _, statErr := os.Stat(p); statErr == nil {
		t.Fatal("file exists")
	}
}

// TestBucketIDKeyOrder: {a: A, b: B} and {b: B, a: A} are one bucket, in
// the file and from clients.
func TestBucketIDKeyOrder(t *testing.T) {
	c := mustConfig(t, "domain: d\nbuckets:\n  - bucket_id: {b: B, a: A}\n    requests_per_unit: 1\n    unit: second")
	if c.match(map[string]string{"a": "A", "b": "B"}) == nil {
		t.Fatal("key order mattered")
	}
	if canonicalID(map[string]string{"a": "A", "b": "B"}) != canonicalID(map[string]string{"b": "B", "a": "A"}) {
		t.Fatal("canonical ids differ")
	}
	// No two ids share a canonical name, however their parts are cut.
	for _, pair := range [][2]map[string]string{
		{{"a": "bc"}, {"ab": "c"}},
		{{"a": "1:b"}, {"a": "1", "b": ""}},
		{{"a": ""}, {"a:": ""}},
	} {
		if canonicalID(pair[0]) == canonicalID(pair[1]) {
			t.Errorf("%v and %v share %q", pair[0], pair[1], canonicalID(pair[0]))
		}
	}
	if got := displayID(map[string]string{"user": "a b", "route": "api"}); got != `{route: api, user: "a b"}` {
		t.Errorf("displayID = %s", got)
	}
}
