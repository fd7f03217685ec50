package rls

import (
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// match is what a request's descriptor matched.
type match struct {
	rule *descRule
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
			rule: &descRule{
				FullKey: descriptorKey(domain, d),
				Limits: []*limitSpec{{
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
	var rule *descRule
	var shared []string
	// metricValue[i] is what the value_to_metric key writes after entry
	// i's key ("" for nothing); built only when some level makes that key
	// differ from the rule's own name (needV2M), which is rare.
	var buf [8]string
	metricValue := buf[:0]
	needV2M := false
	children, prev := root.children, root
	for i, e := range entries {
		finalKey := e.GetKey() + "_" + e.GetValue()
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
		value := ""
		if next != nil {
			matched := e.GetKey() // the composite key this level matched
			switch {
			case wildcard != "":
				matched = wildcard
			case byValue:
				matched = finalKey
			}
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
			if !sameSegment(matched, e.GetKey(), value) {
				needV2M = true
			}
		}
		metricValue = append(metricValue, value)
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
	m = match{rule: rule, statsKey: rule.FullKey, shared: shared}
	var b strings.Builder
	switch {
	case rule.DetailedMetric:
		// Every entry's own value, except share_threshold's patterns.
		b.WriteString(domain)
		for i, e := range entries {
			b.WriteByte('.')
			b.WriteString(e.GetKey())
			switch {
			case i < len(shared) && shared[i] != "":
				b.WriteByte('_')
				b.WriteString(shared[i])
			case shared != nil && e.GetValue() == "":
			default:
				// Without share_threshold the reference writes the
				// '_' even before an empty value.
				b.WriteByte('_')
				b.WriteString(e.GetValue())
			}
		}
		m.statsKey = b.String()
	case needV2M:
		b.WriteString(domain)
		for i, e := range entries {
			b.WriteByte('.')
			b.WriteString(e.GetKey())
			if metricValue[i] != "" {
				b.WriteByte('_')
				b.WriteString(metricValue[i])
			}
		}
		m.statsKey = b.String()
	}
	return m, true
}

// sameSegment reports whether key, followed by "_" + value when value is
// not empty, spells composite.
func sameSegment(composite, key, value string) bool {
	if value == "" {
		return composite == key
	}
	return len(composite) == len(key)+1+len(value) && strings.HasPrefix(composite, key) &&
		composite[len(key)] == '_' && composite[len(key)+1:] == value
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
