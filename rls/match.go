package rls

import (
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// match is what a request's descriptor matched.
type match struct {
	rule *Rule
	// statsKey names the counters the hit goes to: the rule's FullKey, or
	// the detailed_metric / value_to_metric / share_threshold key.
	statsKey string
	// shared[i], when not "", replaces the value of entry i in the store
	// key (share_threshold: every value under one wildcard shares a
	// counter).
	shared []string
	// override is the request's own limit (descriptor.limit).
	override bool
}

// find matches descriptor d of domain as the reference's GetLimit does:
// level by level along d's entries, at each level the exact "key_value"
// child first, then the first wildcard child whose prefix matches, then the
// "key" child; the descriptor matches a rule only when its last entry lands
// on a level with a rate limit. ok is false when the domain is unknown.
func (c *Config) find(domain string, d *ratelimitv3.RateLimitDescriptor) (m match, ok bool) {
	root := c.domains[domain]
	if root == nil {
		return match{}, false
	}
	if lim := d.GetLimit(); lim != nil {
		// Envoy's per-route override: applied as given, never in shadow
		// mode, whatever the configuration says (even nothing).
		return match{
			rule: &Rule{
				FullKey: descriptorKey(domain, d),
				Limits: []*Limit{{
					RequestsPerUnit: lim.GetRequestsPerUnit(),
					Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(lim.GetUnit()),
					UnitMultiplier:  1,
				}},
			},
			statsKey: descriptorKey(domain, d),
			override: true,
		}, true
	}
	entries := d.GetEntries()
	var rule *Rule
	var detailed, v2m strings.Builder
	detailed.WriteString(domain)
	v2m.WriteString(domain)
	var shared []string
	children, prev := root.children, root
	for i, e := range entries {
		finalKey := e.GetKey() + "_" + e.GetValue()
		detailed.WriteByte('.')
		detailed.WriteString(finalKey)
		next := children[finalKey]
		wildcard := ""
		if next == nil {
			for _, w := range prev.wildcards {
				if strings.HasPrefix(finalKey, strings.TrimSuffix(w, "*")) {
					next, wildcard = children[w], w
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = children[e.GetKey()]
		}
		sharedHere := ""
		if wildcard != "" && next != nil && next.shareThreshold && next.wildcardPattern != "" {
			sharedHere = strings.TrimPrefix(next.wildcardPattern, e.GetKey()+"_")
			if shared == nil {
				shared = make([]string, len(entries))
			}
			shared[i] = sharedHere
		}
		v2m.WriteByte('.')
		v2m.WriteString(e.GetKey())
		if next != nil {
			var value string
			switch {
			case wildcard != "" && sharedHere != "":
				value = sharedHere
			case wildcard != "" && next.valueToMetric:
				value = e.GetValue()
			case wildcard != "":
				value = strings.TrimPrefix(wildcard, e.GetKey()+"_")
			case byValue:
				value = e.GetValue()
			case next.valueToMetric:
				value = e.GetValue()
			}
			if value != "" {
				v2m.WriteByte('_')
				v2m.WriteString(value)
			}
		}
		if next != nil && next.rule != nil && i == len(entries)-1 {
			rule = next.rule
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		children, prev = next.children, next
	}
	if rule == nil {
		return match{}, true
	}
	m = match{rule: rule, statsKey: rule.FullKey}
	if shared != nil {
		m.shared = shared
	}
	switch {
	case rule.DetailedMetric && shared != nil:
		var b strings.Builder
		b.WriteString(domain)
		for i, e := range entries {
			b.WriteByte('.')
			b.WriteString(e.GetKey())
			if i < len(shared) && shared[i] != "" {
				b.WriteByte('_')
				b.WriteString(shared[i])
			} else if e.GetValue() != "" {
				b.WriteByte('_')
				b.WriteString(e.GetValue())
			}
		}
		m.statsKey = b.String()
	case rule.DetailedMetric:
		m.statsKey = detailed.String()
	default:
		m.statsKey = v2m.String()
	}
	return m, true
}

// descriptorKey is the reference's name of an overridden limit:
// "domain.key_value.key".
func descriptorKey(domain string, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	b.WriteByte('.')
	for i, e := range d.GetEntries() {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}
