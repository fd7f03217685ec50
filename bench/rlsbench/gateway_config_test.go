package rlsbench

import (
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// The configurations Envoy Gateway's translator writes
// (internal/xds/translator/ratelimit.go in envoyproxy/gateway, its
// testdata/out/ratelimit-config): one RateLimitConfig per listener, name =
// domain; the route's name as key and value at the top; beneath it one
// chain per rule of the BackendTrafficPolicy: rule-N-match-M with the key
// as value for a header that must match, without a value for a distinct
// header (one limit per value); masked_remote_address with the CIDR as
// value, and remote_address without a value for a distinct client; the
// limit on the leaf; shadow_mode the only flag.
const (
	gwHTTP  = "default/eg/http"
	gwGRPC  = "default/eg/grpc"
	gwTCP   = "default/eg/tcp"
	routeA  = "httproute/default/backend/rule/0/match/0/www_example_com"
	routeB  = "httproute/default/backend/rule/1/match/0/api_example_com"
	routeG  = "grpcroute/default/grpc-backend/rule/0/match/0/grpc_example_com"
	policyB = "default/api-policy/rule/0" // newer translators nest the policy's rule
)

func gwNode(key, value string, children ...*rlconfv3.RateLimitDescriptor) *rlconfv3.RateLimitDescriptor {
	return &rlconfv3.RateLimitDescriptor{Key: key, Value: value, Descriptors: children}
}

func gwLeaf(key, value string, unit rlconfv3.RateLimitUnit, n uint32) *rlconfv3.RateLimitDescriptor {
	return &rlconfv3.RateLimitDescriptor{Key: key, Value: value,
		RateLimit: &rlconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}}
}

func gwShadow(d *rlconfv3.RateLimitDescriptor) *rlconfv3.RateLimitDescriptor {
	d.ShadowMode = true
	return d
}

func gwDomain(domain string, ds ...*rlconfv3.RateLimitDescriptor) *rlconfv3.RateLimitConfig {
	return &rlconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: ds}
}

// gatewaySnapshot1 is the first configuration: two HTTP routes and a gRPC
// one, every unit from second to year. The first rule's limit (5 a
// second) tells which snapshot a server applies (see gatewayProbe).
func gatewaySnapshot1() []*rlconfv3.RateLimitConfig {
	return []*rlconfv3.RateLimitConfig{
		gwDomain(gwHTTP,
			gwNode(routeA, routeA,
				// two header matches and a CIDR (EG's header-and-cidr-matches)
				gwNode("rule-0-match-0", "rule-0-match-0",
					gwNode("rule-0-match-1", "rule-0-match-1",
						gwLeaf("masked_remote_address", "0.0.0.0/0", rlconfv3.RateLimitUnit_SECOND, 5))),
				// a distinct header: one limit per value
				gwLeaf("rule-1-match-0", "", rlconfv3.RateLimitUnit_MINUTE, 3),
				// a distinct client within a CIDR
				gwNode("masked_remote_address", "192.168.0.0/16",
					gwLeaf("remote_address", "", rlconfv3.RateLimitUnit_HOUR, 4)),
				gwShadow(gwLeaf("rule-3-match-0", "rule-3-match-0", rlconfv3.RateLimitUnit_SECOND, 2)),
				gwLeaf("rule-4-match-0", "rule-4-match-0", rlconfv3.RateLimitUnit_DAY, 6),
			),
			gwNode(routeB, routeB,
				gwNode(policyB, policyB,
					gwLeaf("rule-0-match-0", "rule-0-match-0", rlconfv3.RateLimitUnit_MONTH, 5)),
				gwLeaf("rule-1-match-0", "rule-1-match-0", rlconfv3.RateLimitUnit_YEAR, 3),
				gwLeaf("rule-2-match-0", "rule-2-match-0", rlconfv3.RateLimitUnit_WEEK, 4),
			),
		),
		gwDomain(gwGRPC,
			gwNode(routeG, routeG,
				gwLeaf("remote_address", "", rlconfv3.RateLimitUnit_SECOND, 3))),
	}
}

// gatewaySnapshot2 changes the first: limits and units changed, a shadow
// rule enforced, a rule removed and another added, the gRPC domain's
// limit changed and a domain added.
func gatewaySnapshot2() []*rlconfv3.RateLimitConfig {
	return []*rlconfv3.RateLimitConfig{
		gwDomain(gwHTTP,
			gwNode(routeA, routeA,
				gwNode("rule-0-match-0", "rule-0-match-0",
					gwNode("rule-0-match-1", "rule-0-match-1",
						gwLeaf("masked_remote_address", "0.0.0.0/0", rlconfv3.RateLimitUnit_SECOND, 8))),
				gwLeaf("rule-1-match-0", "", rlconfv3.RateLimitUnit_SECOND, 2),
				gwNode("masked_remote_address", "192.168.0.0/16",
					gwLeaf("remote_address", "", rlconfv3.RateLimitUnit_HOUR, 4)),
				gwLeaf("rule-3-match-0", "rule-3-match-0", rlconfv3.RateLimitUnit_SECOND, 2),
				gwLeaf("rule-4-match-0", "rule-4-match-0", rlconfv3.RateLimitUnit_DAY, 6),
			),
			gwNode(routeB, routeB,
				gwNode(policyB, policyB,
					gwLeaf("rule-0-match-0", "rule-0-match-0", rlconfv3.RateLimitUnit_MONTH, 5)),
				gwLeaf("rule-2-match-0", "rule-2-match-0", rlconfv3.RateLimitUnit_WEEK, 4),
				gwShadow(gwLeaf("rule-3-match-0", "rule-3-match-0", rlconfv3.RateLimitUnit_YEAR, 2)),
			),
		),
		gwDomain(gwGRPC,
			gwNode(routeG, routeG,
				gwLeaf("remote_address", "", rlconfv3.RateLimitUnit_MINUTE, 4))),
		gwDomain(gwTCP,
			gwNode(routeA, routeA,
				gwLeaf("remote_address", "", rlconfv3.RateLimitUnit_SECOND, 1))),
	}
}

// gatewaySnapshotInvalid is the second with one more domain that neither
// server may load: a rule twice at one level (the reference's "duplicate
// descriptor composite key"). The whole response is refused.
func gatewaySnapshotInvalid() []*rlconfv3.RateLimitConfig {
	return append(gatewaySnapshot2(), gwDomain("default/eg/bad",
		gwNode(routeA, routeA,
			gwLeaf("rule-0-match-0", "rule-0-match-0", rlconfv3.RateLimitUnit_SECOND, 1),
			gwLeaf("rule-0-match-0", "rule-0-match-0", rlconfv3.RateLimitUnit_MINUTE, 10))))
}

// The descriptors Envoy sends for these routes (one per rule whose
// actions all produced an entry), and some that match no rule.
var (
	gwA0  = [][2]string{{routeA, routeA}, {"rule-0-match-0", "rule-0-match-0"}, {"rule-0-match-1", "rule-0-match-1"}, {"masked_remote_address", "0.0.0.0/0"}}
	gwA1a = [][2]string{{routeA, routeA}, {"rule-1-match-0", "alice"}}
	gwA1b = [][2]string{{routeA, routeA}, {"rule-1-match-0", "bob"}}
	gwA2a = [][2]string{{routeA, routeA}, {"masked_remote_address", "192.168.0.0/16"}, {"remote_address", "192.168.1.7"}}
	gwA2b = [][2]string{{routeA, routeA}, {"masked_remote_address", "192.168.0.0/16"}, {"remote_address", "192.168.44.2"}}
	gwA3  = [][2]string{{routeA, routeA}, {"rule-3-match-0", "rule-3-match-0"}}
	gwA4  = [][2]string{{routeA, routeA}, {"rule-4-match-0", "rule-4-match-0"}}
	gwB0  = [][2]string{{routeB, routeB}, {policyB, policyB}, {"rule-0-match-0", "rule-0-match-0"}}
	gwB1  = [][2]string{{routeB, routeB}, {"rule-1-match-0", "rule-1-match-0"}}
	gwB2  = [][2]string{{routeB, routeB}, {"rule-2-match-0", "rule-2-match-0"}}
	gwB3  = [][2]string{{routeB, routeB}, {"rule-3-match-0", "rule-3-match-0"}}
	gwG   = [][2]string{{routeG, routeG}, {"remote_address", "10.1.2.3"}}
	gwTA  = [][2]string{{routeA, routeA}, {"remote_address", "10.1.2.3"}}
)

var gatewayPool = []descSpec{
	{entries: gwA0}, {entries: gwA1a}, {entries: gwA1b}, {entries: gwA2a}, {entries: gwA2b},
	{entries: gwA3}, {entries: gwA4}, {entries: gwB0}, {entries: gwB1}, {entries: gwB2}, {entries: gwB3},
	{entries: gwG}, {entries: gwTA},
	// ends above the leaf
	{entries: gwA0[:3]},
	// a CIDR that has no rule
	{entries: [][2]string{{routeA, routeA}, {"masked_remote_address", "10.0.0.0/8"}, {"remote_address", "10.0.0.1"}}},
	// a route that has no rule, and a route's key with another value
	{entries: [][2]string{{"httproute/default/other/rule/0/match/0/x", "httproute/default/other/rule/0/match/0/x"}, {"rule-0-match-0", "rule-0-match-0"}}},
	{entries: [][2]string{{routeA, "httproute/default/other"}, {"rule-4-match-0", "rule-4-match-0"}}},
}

// gatewayCombos are calls as Envoy sends them for one request on a route
// with several rules: a descriptor for each rule that applies.
var gatewayCombos = [][][][2]string{
	{gwA0, gwA1a, gwA2a, gwA3, gwA4},
	{gwA0, gwA1b},
	{gwA2b, gwA3},
	{gwA1a, gwA1a},
	{gwB0, gwB1, gwB2, gwB3},
	{gwB0, gwB3},
}
