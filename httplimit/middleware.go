package httplimit

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/smoothrate/ratelimit/throttle"
)

// New returns middleware that admits a request only if lim (and every limit
// added with WithLimit) allows it, and refuses it otherwise with 429 Too
// Many Requests. It works with anything that takes a
// func(http.Handler) http.Handler: net/http, chi, gorilla/mux.
//
// Errors wrap ErrInvalidOption.
func New(lim *throttle.Limiter, opts ...Option) (func(http.Handler) http.Handler, error) {
	c, err := build(lim, opts)
	if err != nil {
		return nil, err
	}
	policy := policyValue(c.limits)
	m := &middleware{config: c, policy: []string{policy}[:1:1],
		small: !c.xHeaders && len(c.limits) == 1 && len(c.limits[0].name) <= 16}
	for _, l := range c.limits {
		m.quoted = append(m.quoted, `"`+l.name+`"`)
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.DefaultServeMux
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}, nil
}

// middleware is New's result with what it precomputes: the header values
// that do not change from one response to the next.
type middleware struct {
	*config
	policy []string // RateLimit-Policy, shared by every response (capacity 1: Add copies)
	quoted []string // each limit's name as a structured-field string
	small  bool     // the header values fit a smallBlock
}

// inline is how many limits are checked without allocating the slices for
// them.
const inline = 4

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	cost := 1
	if m.cost != nil {
		cost = m.cost(r)
	}
	ctx := r.Context()
	var dsArr [inline]throttle.Decision
	var ds []throttle.Decision
	var err error
	if len(m.limits) == 1 {
		var d throttle.Decision
		d, err = m.limits[0].lim.AllowN(ctx, m.key(&m.limits[0], r), cost)
		dsArr[0] = d
		ds = dsArr[:1]
	} else {
		var checksArr [inline]throttle.Check
		checks := checksArr[:0]
		for i := range m.limits {
			l := &m.limits[i]
			checks = append(checks, throttle.Check{Limiter: l.lim, Key: m.key(l, r), N: cost})
		}
		ds, err = throttle.AllowAll(ctx, checks...)
	}
	if err != nil {
		m.storeFailed(w, r, next, err)
		return
	}
	resp := summarize(ds)
	m.setHeaders(w.Header(), ds, resp)
	if resp.allowed {
		next.ServeHTTP(w, r)
		return
	}
	d := throttle.Decisions(ds).Strictest()
	if m.onRefusal != nil {
		m.onRefusal(r, d)
	}
	if m.deny != nil {
		m.deny(w, r, d)
		return
	}
	m.problem(w, ds, resp.retryAfter)
}

// key builds a limit's key for r: the limit's name, then each part,
// "name:part|part". A part the request lacks (no such header, an anonymous
// request) is replaced by the client IP, so leaving it out does not escape
// the limit.
func (m *middleware) key(l *limitSpec, r *http.Request) string {
	var arr [96]byte
	b := append(arr[:0], l.name...)
	b = append(b, ':')
	for i, kp := range l.parts {
		if i > 0 {
			b = append(b, '|')
		}
		switch kp.kind {
		case partIP:
			b = m.appendClient(b, r)
			continue
		case partConst:
			b = append(b, kp.value...)
			continue
		case partRoute:
			if r.Pattern != "" {
				b = append(b, r.Pattern...)
			} else {
				b = append(b, r.URL.Path...)
			}
			continue
		}
		var v string
		var ok bool
		if kp.kind == partHeader {
			if vs := r.Header[kp.header]; len(vs) > 0 && vs[0] != "" {
				v, ok = vs[0], true
			}
		} else {
			v, ok = kp.fromCtx(r.Context())
		}
		if ok && v != "" {
			b = append(b, '=')
			b = append(b, v...)
		} else {
			b = append(b, "ip="...)
			b = m.appendClient(b, r)
		}
	}
	return string(b)
}

// appendClient appends the client's address group, or, when the peer has no
// IP address (a Unix socket), its RemoteAddr as is.
func (m *middleware) appendClient(b []byte, r *http.Request) []byte {
	if a, ok := m.clientIP(r); ok {
		return m.appendIP(b, a)
	}
	if r.RemoteAddr == "" {
		return append(b, '?')
	}
	return append(b, r.RemoteAddr...)
}

// storeFailed applies the store-failure policy: the error goes to the hook,
// then the request either passes (fail open) or gets 503.
func (m *middleware) storeFailed(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if m.onError != nil {
		m.onError(r, err)
	}
	if m.failOpen {
		next.ServeHTTP(w, r)
		return
	}
	h := w.Header()
	h.Set(hRetryAfter, strconv.FormatInt(max(ceilSeconds(m.closedRetry), 1), 10))
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limit could not be checked; retry later"}` + "\n"))
}

// quotaExceeded is the problem type of draft-ietf-httpapi-ratelimit-headers
// §7.2 (registered with IANA's HTTP problem types).
const quotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// problem writes the default refusal: 429 with an RFC 9457 problem body
// naming the policies that refused.
func (m *middleware) problem(w http.ResponseWriter, ds []throttle.Decision, retryAfter int64) {
	var b strings.Builder
	b.WriteString(`{"type":"` + quotaExceeded + `","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"`)
	if retryAfter >= 0 {
		b.WriteString("retry after ")
		b.WriteString(strconv.FormatInt(retryAfter, 10))
		b.WriteString(" seconds")
	} else {
		b.WriteString("the request costs more than the quota allows at once")
	}
	b.WriteString(`","violated-policies":[`)
	first := true
	for i, d := range ds {
		if d.Allowed {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(m.quoted[i])
	}
	b.WriteString("]}\n")
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte(b.String()))
}
