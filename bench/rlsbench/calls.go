package rlsbench

import (
	"cmp"
	"math/rand/v2"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// CoreConfig is the differential's main configuration: every rule of the
// reference's format that decides an answer, in the reference's own
// syntax. Limits are small so that a batch of calls crosses them.
var CoreConfig = map[string]string{
	"rl.yaml": `domain: rl
descriptors:
  # a key alone matches any value
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 5}
  # an exact value beats a wildcard, which beats the key alone;
  # wildcards are tried in the order of the file (bo* before b*)
  - key: user
    value: alice
    rate_limit: {unit: minute, requests_per_unit: 7, name: alice}
  - key: user
    value: "bo*"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: user
    value: "b*"
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 20}
  # nested descriptors, a level without a rate_limit, the request must
  # end where a rate_limit is
  - key: path
    value: /api
    descriptors:
      - key: method
        value: GET
        rate_limit: {unit: second, requests_per_unit: 4}
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 10}
        descriptors:
          - key: tenant
            rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 6}
    descriptors:
      - key: method
        value: "P*"
        rate_limit: {unit: day, requests_per_unit: 9}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  # replaces: a premium descriptor in the request lifts the basic limit
  - key: tier
    value: premium
    rate_limit: {unit: second, requests_per_unit: 8, name: premium, replaces: [{name: basic}]}
  - key: tier
    rate_limit: {unit: second, requests_per_unit: 2, name: basic}
  # an unlimited rule that replaces a named one
  - key: vip
    rate_limit: {unlimited: true, name: vip, replaces: [{name: alice}]}
`,
	"other.yaml": `domain: other
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 2}
`,
}

// ExtraConfig holds the rest of the reference's format, kept apart so that
// a server that refuses one of them still runs the core comparison: the
// units beyond day, a limit of 0, share_threshold, detailed_metric and
// value_to_metric (metrics only), and a wildcard in a key without a value.
var ExtraConfig = map[string]string{
	"extra.yaml": `domain: extra
descriptors:
  - key: w
    rate_limit: {unit: week, requests_per_unit: 5}
  - key: mo
    rate_limit: {unit: month, requests_per_unit: 5}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 5}
  - key: none
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: files
    value: "f*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: detailed
    detailed_metric: true
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: "pre*"
    rate_limit: {unit: second, requests_per_unit: 3}
`,
}

// QuirkConfig and QuirkPool show where the reference is wrong, so that
// the differential can say whether ours differs there: its counter key
// joins keys and values with "_", so that (col, x_1) and (col_x, 1) share
// one counter. The subtest logs mismatches here instead of failing.
var QuirkConfig = map[string]string{
	"quirk.yaml": `domain: quirk
descriptors:
  - key: col
    rate_limit: {unit: hour, requests_per_unit: 200}
  - key: col_x
    rate_limit: {unit: hour, requests_per_unit: 200}
`,
}

var QuirkPool = []descSpec{
	{entries: [][2]string{{"col", "x_1"}}},
	{entries: [][2]string{{"col_x", "1"}}},
}

// A descriptor to draw from: its entries and an optional limit override.
type descSpec struct {
	entries  [][2]string
	override *rlsv3.RateLimitDescriptor_RateLimitOverride
}

// CorePool and ExtraPool are the descriptors the random calls draw from:
// ones that match each rule, ones that match none (longer or shorter than
// a rule, unknown keys), and limit overrides.
var CorePool = []descSpec{
	{entries: [][2]string{{"remote_address", "10.0.0.1"}}},
	{entries: [][2]string{{"remote_address", "10.0.0.2"}}},
	{entries: [][2]string{{"user", "alice"}}},
	{entries: [][2]string{{"user", "bob"}}},
	{entries: [][2]string{{"user", "bo"}}},
	{entries: [][2]string{{"user", "bill"}}},
	{entries: [][2]string{{"user", "carol"}}},
	{entries: [][2]string{{"user", ""}}},
	{entries: [][2]string{{"path", "/api"}, {"method", "GET"}}},
	{entries: [][2]string{{"path", "/api"}, {"method", "POST"}}},
	{entries: [][2]string{{"path", "/api"}, {"method", "POST"}, {"tenant", "t1"}}},
	{entries: [][2]string{{"path", "/api"}, {"method", "GET"}, {"tenant", "t1"}}},
	{entries: [][2]string{{"path", "/api"}}},
	{entries: [][2]string{{"path", "/x"}}},
	{entries: [][2]string{{"path", "/x"}, {"method", "PUT"}}},
	{entries: [][2]string{{"path", "/x"}, {"method", "GET"}}},
	{entries: [][2]string{{"shadow", "s1"}}},
	{entries: [][2]string{{"free", "x"}}},
	{entries: [][2]string{{"tier", "premium"}}},
	{entries: [][2]string{{"tier", "basic"}}},
	{entries: [][2]string{{"tier", "gold"}}},
	{entries: [][2]string{{"vip", "1"}}},
	{entries: [][2]string{{"nokey", "v"}}},
	{entries: [][2]string{{"remote_address", "10.0.0.1"}, {"extra", "2"}}},
	{entries: [][2]string{{"remote_address", "10.0.0.9"}},
		override: &rlsv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_SECOND}},
	{entries: [][2]string{{"nokey", "z"}},
		override: &rlsv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}},
	{entries: [][2]string{{"user", "alice"}},
		override: &rlsv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typev3.RateLimitUnit_HOUR}},
	{}, // no entries at all
}

// CoreCombos are calls whose descriptors act on each other: replaces
// (premium lifts basic, vip lifts alice, in either order), the same
// descriptor twice, shadow beside a real limit, unlimited beside a limit.
var CoreCombos = [][][][2]string{
	{{{"tier", "premium"}}, {{"tier", "basic"}}},
	{{{"tier", "gold"}}, {{"tier", "premium"}}, {{"remote_address", "10.0.0.1"}}},
	{{{"user", "alice"}}, {{"vip", "1"}}},
	{{{"vip", "1"}}, {{"user", "alice"}}, {{"user", "bob"}}},
	{{{"remote_address", "10.0.0.2"}}, {{"remote_address", "10.0.0.2"}}},
	{{{"shadow", "s1"}}, {{"user", "bo"}}},
	{{{"free", "x"}}, {{"path", "/x"}}},
}

var ExtraPool = []descSpec{
	{entries: [][2]string{{"w", "1"}}},
	{entries: [][2]string{{"mo", "1"}}},
	{entries: [][2]string{{"y", "1"}}},
	{entries: [][2]string{{"none", "1"}}},
	{entries: [][2]string{{"files", "f1"}}},
	{entries: [][2]string{{"files", "f2"}}},
	{entries: [][2]string{{"files", "g"}}},
	{entries: [][2]string{{"detailed", "a"}}},
	{entries: [][2]string{{"prefix", "a"}}},
	{entries: [][2]string{{"pre", "b"}}},
}

// Gen draws random calls from a pool. Each batch (one second) focuses on
// a few descriptors so that their limits are crossed.
type Gen struct {
	Rand    *rand.Rand
	Pool    []descSpec
	Domains []string // the first is the usual one; "unknown" is added
	// DescriptorAddend enables the per-descriptor hits_addend of newer
	// protos (the reference honours it, including 0).
	DescriptorAddend bool
	// DescriptorAddendEvery gives one descriptor in N its own hits_addend
	// (0: 8), drawn from DescriptorAddends (nil: 0, 1, 2).
	DescriptorAddendEvery int
	DescriptorAddends     []uint64
	// Combos are calls sent as they are, one call in six.
	Combos [][][][2]string
	// ComboAddends gives the descriptors of Combos their own hits_addend
	// too, as Envoy Gateway's costs give one to every descriptor of a
	// call.
	ComboAddends bool
	// Invalid sends, now and then, a call without a domain or without
	// descriptors.
	Invalid bool
	focus   []descSpec
}

// NewBatch picks the descriptors of the next batch.
func (g *Gen) NewBatch() {
	n := 3 + g.Rand.IntN(3)
	g.focus = g.focus[:0]
	for range n {
		g.focus = append(g.focus, g.Pool[g.Rand.IntN(len(g.Pool))])
	}
}

// Call returns the next random call.
func (g *Gen) Call() *pb.RateLimitRequest {
	if g.focus == nil {
		g.NewBatch()
	}
	r := &pb.RateLimitRequest{Domain: g.Domains[0]}
	switch x := g.Rand.IntN(100); {
	case x < 5:
		r.Domain = "unknown"
	case x < 15 && len(g.Domains) > 1:
		r.Domain = g.Domains[1+g.Rand.IntN(len(g.Domains)-1)]
	}
	addends := []uint32{0, 0, 1, 1, 1, 2, 3, 7}
	r.HitsAddend = addends[g.Rand.IntN(len(addends))]
	if g.Rand.IntN(50) == 0 {
		r.HitsAddend = []uint32{100, 1<<32 - 1}[g.Rand.IntN(2)]
	}
	if len(g.Combos) > 0 && r.Domain == g.Domains[0] && g.Rand.IntN(6) == 0 {
		for _, entries := range g.Combos[g.Rand.IntN(len(g.Combos))] {
			d := &rlsv3.RateLimitDescriptor{}
			for _, e := range entries {
				d.Entries = append(d.Entries, &rlsv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
			}
			if g.ComboAddends {
				g.addend(d)
			}
			r.Descriptors = append(r.Descriptors, d)
		}
		return r
	}
	for range 1 + g.Rand.IntN(3) {
		p := g.focus[g.Rand.IntN(len(g.focus))]
		if g.Rand.IntN(10) == 0 {
			p = g.Pool[g.Rand.IntN(len(g.Pool))]
		}
		d := &rlsv3.RateLimitDescriptor{Limit: p.override}
		for _, e := range p.entries {
			d.Entries = append(d.Entries, &rlsv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		g.addend(d)
		r.Descriptors = append(r.Descriptors, d)
	}
	if g.Invalid && g.Rand.IntN(40) == 0 {
		if g.Rand.IntN(2) == 0 {
			r.Domain = ""
		} else {
			r.Descriptors = nil
		}
	}
	return r
}

// addend gives d its own hits_addend, now and then.
func (g *Gen) addend(d *rlsv3.RateLimitDescriptor) {
	if !g.DescriptorAddend || g.Rand.IntN(cmp.Or(g.DescriptorAddendEvery, 8)) != 0 {
		return
	}
	if g.DescriptorAddends == nil {
		d.HitsAddend = wrapperspb.UInt64(uint64(g.Rand.IntN(3)))
		return
	}
	d.HitsAddend = wrapperspb.UInt64(g.DescriptorAddends[g.Rand.IntN(len(g.DescriptorAddends))])
}
