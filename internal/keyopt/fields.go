package keyopt

import (
	"strconv"
	"time"

	"github.com/smoothrate/ratelimit/throttle"
)

// The IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-10), which httplimit writes as
// HTTP headers and grpclimit as metadata, in the same words.

// Policy is the RateLimit-Policy field, the same on every answer:
// `"name";q=Count;w=Period` per limit (§4). w must be a whole number of
// seconds, at least 1: a period that is not is rounded up, with q
// unchanged, so that a client pacing itself by the announced policy is
// never faster than the real limit. Names are ValidName's, which need no
// escaping.
func Policy[P any](limits []Limit[P]) string {
	var b []byte
	for i, l := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		lim := l.Lim.Limit()
		b = append(b, '"')
		b = append(b, l.Name...)
		b = append(b, `";q=`...)
		b = strconv.AppendInt(b, int64(lim.Count), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, CeilSeconds(lim.Period), 10)
	}
	return string(b)
}

// Quoted returns each limit's name as a structured-field string.
func Quoted[P any](limits []Limit[P]) []string {
	q := make([]string, len(limits))
	for i, l := range limits {
		q[i] = `"` + l.Name + `"`
	}
	return q
}

// AppendRateLimit appends the RateLimit field of decisions ds, one per
// limit named by quoted (Quoted's): per limit the remaining quota r and t,
// the seconds until it is full again when the request passed (allowed),
// or, when it did not, until it would pass, on the limits that refused it
// (none on those that would have let it through, nor on one it can never
// pass).
func AppendRateLimit(b []byte, quoted []string, ds []throttle.Decision, allowed bool) []byte {
	for i, d := range ds {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, quoted[i]...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, int64(max(d.Remaining, 0)), 10)
		switch {
		case allowed:
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, CeilSeconds(d.ResetAfter), 10)
		case !d.Allowed && d.RetryAfter != throttle.Never:
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, max(CeilSeconds(d.RetryAfter), 1), 10)
		}
	}
	return b
}

// CeilSeconds rounds d up to whole seconds (delay-seconds, RFC 9110
// §10.2.3): a client told to wait that long is never early.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
