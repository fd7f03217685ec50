package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/smoothrate/ratelimit/internal/keyopt"
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
	policy := keyopt.Policy(c.Limits)
	m := &middleware{config: c, policy: []string{policy}[:1:1], quoted: keyopt.Quoted(c.Limits),
		small: !c.xHeaders && len(c.Limits) == 1 && len(c.Limits[0].Name) <= 16}
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
		if cost = m.cost(r); cost < 0 {
			m.badCost(w, r, cost)
			return
		}
	}
	var dsArr [inline]throttle.Decision
	ds, err := m.decide(r, cost, dsArr[:0])
	if err != nil {
		err = m.StoreError(r.Context(), err) // WithStoreTimeout's bound is an outage
		if r.Context().Err() != nil && !errors.Is(err, throttle.ErrUnavailable) {
			// The client went away (or a deadline before ours ended
			// its request): nothing is known of the store, and the
			// error hook (an outage's log, a store-error counter)
			// hears nothing of it. The request is not passed on.
			m.unchecked(w)
			return
		}
		m.storeFailed(w, r, next, err)
		return
	}
	resp := summarize(ds)
	m.setHeaders(w.Header(), ds, resp)
	if m.decided != nil {
		m.handOver(w, r, next, ds)
		return
	}
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

// decide asks the store about every limit, in one call; the decisions go
// in buf when they fit.
func (m *middleware) decide(r *http.Request, cost int, buf []throttle.Decision) ([]throttle.Decision, error) {
	ctx, cancel := m.Bound(r.Context()) // WithStoreTimeout
	defer cancel()
	if len(m.Limits) == 1 {
		var arr [96]byte
		key := string(m.appendKey(arr[:0], &m.Limits[0], r))
		d, err := m.Limits[0].Lim.AllowN(ctx, key, cost)
		return append(buf, d), err
	}
	// All keys in one string: one allocation whatever the number of
	// limits.
	var arr [256]byte
	var ends [inline]int
	b := arr[:0]
	for i := range m.Limits {
		b = m.appendKey(b, &m.Limits[i], r)
		if i < inline {
			ends[i] = len(b)
		}
	}
	all := string(b)
	var checksArr [inline]throttle.Check
	checks := checksArr[:0]
	start := 0
	for i := range m.Limits {
		var end int
		if i < inline {
			end = ends[i]
		} else { // past inline limits: find the end again
			end = len(m.appendKey(b[:start], &m.Limits[i], r))
		}
		checks = append(checks, throttle.Check{Limiter: m.Limits[i].Lim, Key: all[start:end], N: cost})
		start = end
	}
	return throttle.AllowAll(ctx, checks...)
}

// key is appendKey as a string.
func (m *middleware) key(l *limitSpec, r *http.Request) string {
	var arr [96]byte
	return string(m.appendKey(arr[:0], l, r))
}

// appendKey appends a limit's key for r: the limit's name, then each part,
// "name:part|part". A part the request lacks (no such header, an anonymous
// request) is replaced by the client IP, so leaving it out does not escape
// the limit.
func (m *middleware) appendKey(b []byte, l *limitSpec, r *http.Request) []byte {
	b = append(b, l.Name...)
	b = append(b, ':')
	for i, kp := range l.Parts {
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
				b = keyopt.AppendBounded(b, r.Pattern)
			} else {
				b = keyopt.AppendBounded(b, r.URL.Path)
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
			b = keyopt.AppendBounded(b, v)
		} else {
			b = append(b, "ip="...)
			b = m.appendClient(b, r)
		}
	}
	return b
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
// then the request either passes (failing open, on an outage only:
// throttle.ErrUnavailable) or gets 503. A store set up wrong
// (throttle.ErrMisconfigured) or any other failure never fails open: no
// retry fixes it, and passing would run unlimited for as long as it lasts.
func (m *middleware) storeFailed(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if m.onError != nil {
		m.onError(r, err)
	}
	if m.FailOpen && errors.Is(err, throttle.ErrUnavailable) {
		next.ServeHTTP(w, r)
		return
	}
	m.unchecked(w)
}

// unchecked answers 503 to a request whose limits could not be checked.
func (m *middleware) unchecked(w http.ResponseWriter) {
	h := w.Header()
	h.Set(hRetryAfter, strconv.FormatInt(max(keyopt.CeilSeconds(m.ClosedRetry), 1), 10))
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limit could not be checked; retry later"}` + "\n"))
}

// badCost answers 500 to a request WithCost priced below zero: a bug in
// the cost function, which must neither let the request through unlimited
// (as failing open would) nor pass for a store failure.
func (m *middleware) badCost(w http.ResponseWriter, r *http.Request, cost int) {
	if m.onError != nil {
		m.onError(r, fmt.Errorf("%w: WithCost returned %d for %s %s", throttle.ErrInvalidCost, cost, r.Method, r.URL.Path))
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = w.Write([]byte(`{"type":"about:blank","title":"Internal Server Error","status":500}` + "\n"))
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
