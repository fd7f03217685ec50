package httplimit

import (
	"net/http"
	"strconv"
	"unsafe"

	"github.com/smoothrate/ratelimit/internal/keyopt"
	"github.com/smoothrate/ratelimit/throttle"
)

// Header names in canonical form, so that they can be stored in an
// http.Header directly (Set would canonicalise them on every request).
const (
	hPolicy     = "Ratelimit-Policy"
	hRateLimit  = "Ratelimit"
	hRetryAfter = "Retry-After"
	hXLimit     = "X-Ratelimit-Limit"
	hXRemaining = "X-Ratelimit-Remaining"
	hXReset     = "X-Ratelimit-Reset"
)

// headerBlock holds a response's dynamic header values and their bytes in
// one allocation: http.Header wants a []string per field, and a string per
// value; building them separately would cost an allocation each.
type headerBlock struct {
	vals [5][1]string
	buf  [112]byte
}

// smallBlock is headerBlock for the common case, one limit and no
// X-RateLimit fields: half the bytes to allocate, clear and scan.
type smallBlock struct {
	vals [2][1]string
	buf  [64]byte
}

// response describes what the decisions mean for the headers: whether the
// request passed, and the Retry-After in seconds when it did not (-1 when
// it can never pass).
type response struct {
	allowed    bool
	retryAfter int64
}

// summarize is the response of decisions ds: refused if any refused, with
// the longest wait of those that refused, or none if one of them can never
// pass (a cost above its limit: waiting for the others would only find it
// refused again).
func summarize(ds []throttle.Decision) response {
	r := response{allowed: true, retryAfter: -1}
	never := false
	for _, d := range ds {
		if d.Allowed {
			continue
		}
		r.allowed = false
		if d.RetryAfter == throttle.Never {
			never = true
		} else {
			r.retryAfter = max(r.retryAfter, max(keyopt.CeilSeconds(d.RetryAfter), 1))
		}
	}
	if never {
		r.retryAfter = -1
	}
	return r
}

// setHeaders writes RateLimit-Policy, RateLimit, Retry-After (refusals) and
// the X-RateLimit-* fields (if asked) for the decisions.
//
// RateLimit's t: when the request passed, the seconds until the limit is
// back to its full quota (ResetAfter); when it was refused, the seconds
// until the request would pass (its RetryAfter) on the limits that refused
// it, and nothing on those that would have let it through. Retry-After is
// the largest of those, so it never points earlier than a t we announce.
func (m *middleware) setHeaders(h http.Header, ds []throttle.Decision, resp response) {
	h[hPolicy] = m.policy
	var vals [][1]string
	var b []byte
	if m.small {
		blk := new(smallBlock)
		vals, b = blk.vals[:], blk.buf[:0]
	} else {
		blk := new(headerBlock)
		vals, b = blk.vals[:], blk.buf[:0]
	}
	var ends [5]int
	b = keyopt.AppendRateLimit(b, m.quoted, ds, resp.allowed)
	ends[0] = len(b)
	n := 1
	if !resp.allowed && resp.retryAfter >= 0 {
		b = strconv.AppendInt(b, resp.retryAfter, 10)
		ends[1] = len(b)
		n = 2
	}
	if m.xHeaders {
		d := throttle.Decisions(ds).Strictest()
		reset := keyopt.CeilSeconds(d.ResetAfter)
		if !resp.allowed && resp.retryAfter >= 0 {
			reset = resp.retryAfter
		}
		b = strconv.AppendInt(b, int64(d.Limit), 10)
		ends[2] = len(b)
		b = strconv.AppendInt(b, int64(max(d.Remaining, 0)), 10)
		ends[3] = len(b)
		b = strconv.AppendInt(b, reset, 10)
		ends[4] = len(b)
		n = 5
	}
	// The bytes are never written again, so strings may share them. If b
	// outgrew the block's buffer, it lives in its own array and the
	// strings share that instead.
	s := unsafe.String(unsafe.SliceData(b), len(b))
	start := 0
	for i := 0; i < n; i++ {
		if ends[i] == 0 { // Retry-After not sent
			continue
		}
		vals[i][0] = s[start:ends[i]]
		start = ends[i]
	}
	h[hRateLimit] = vals[0][:]
	if ends[1] != 0 {
		h[hRetryAfter] = vals[1][:]
	}
	if m.xHeaders {
		h[hXLimit] = vals[2][:]
		h[hXRemaining] = vals[3][:]
		h[hXReset] = vals[4][:]
	}
}
