package rls

import (
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// ietfHeaders are the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers for every applied limit, written as
// httplimit writes them: `"name";q=requests;w=seconds` and
// `"name";r=remaining;t=seconds`, t being, on a refused call, the wait of
// the limits that refused it (and absent on the others), and Retry-After
// the longest such wait.
func ietfHeaders(calls []call, refused bool) []*corev3.HeaderValue {
	var policy, state []byte
	retry := int64(-1)
	for i := range calls {
		c := &calls[i]
		for k := range c.results {
			r := &c.results[k]
			name := sfString(limitName(c, r))
			if len(policy) > 0 {
				policy = append(policy, ", "...)
				state = append(state, ", "...)
			}
			policy = append(policy, name...)
			policy = append(policy, ";q="...)
			policy = strconv.AppendUint(policy, uint64(r.limit.RequestsPerUnit), 10)
			policy = append(policy, ";w="...)
			policy = strconv.AppendInt(policy, r.limit.seconds(), 10)
			state = append(state, name...)
			state = append(state, ";r="...)
			state = strconv.AppendUint(state, uint64(r.remaining), 10)
			if !refused || (r.over && !c.m.rule.ShadowMode && !c.m.rule.QuotaMode) {
				state = append(state, ";t="...)
				state = strconv.AppendInt(state, r.reset, 10)
				if refused {
					retry = max(retry, r.reset)
				}
			}
		}
	}
	if len(policy) == 0 {
		return nil
	}
	hs := []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: string(policy)},
		{Key: "RateLimit", Value: string(state)},
	}
	if refused && retry >= 0 {
		hs = append(hs, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(max(retry, 1), 10)})
	}
	return hs
}

// limitName names a limit in the IETF fields: its name, else its rule's
// metric key, with "#index" for the later limits of a rate_limits list.
func limitName(c *call, r *result) string {
	if r.limit.Name != "" {
		return r.limit.Name
	}
	if r.limit.index > 0 {
		return c.m.statsKey + "#" + strconv.Itoa(r.limit.index)
	}
	return c.m.statsKey
}

// sfString quotes s as a structured-field string (RFC 8941 §3.3.3):
// printable ASCII only, '"' and '\' escaped; anything else becomes '?'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '"' || ch == '\\':
			b.WriteByte('\\')
			b.WriteByte(ch)
		case ch < 0x20 || ch > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(ch)
		}
	}
	b.WriteByte('"')
	return b.String()
}
