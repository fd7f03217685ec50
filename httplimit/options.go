package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/smoothrate/ratelimit/internal/keyopt"
	"github.com/smoothrate/ratelimit/internal/netprefix"
	"github.com/smoothrate/ratelimit/throttle"
)

// ErrInvalidOption is wrapped by every error New returns: a nil limiter, a
// nil option, a bad CIDR, a policy name the headers cannot carry, a prefix
// length out of range, options that contradict each other.
var ErrInvalidOption = errors.New("httplimit: invalid option")

// An Option configures the middleware New returns. A nil option, an
// option with an invalid value and options that contradict each other
// (WithFailOpen and WithFailClosed) are errors wrapping ErrInvalidOption,
// returned by New, as everywhere in this module.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// DefaultName is the policy name of the limit given to New, as the
// RateLimit-Policy and RateLimit headers show it, unless WithName says
// otherwise.
const DefaultName = "default"

// config holds every knob with its default; build is the only place
// defaults are set. The limits and the store-failure policy are kept as
// grpclimit keeps them (internal/keyopt).
type config struct {
	keyopt.Config[KeyPart]
	cost           func(*http.Request) int
	trustedProxies []netip.Prefix
	header         ForwardingHeader
	v4Bits, v6Bits int
	xHeaders       bool
	onError        func(*http.Request, error)
	onRefusal      func(*http.Request, throttle.Decision)
	deny           func(http.ResponseWriter, *http.Request, throttle.Decision)
	decided        DecisionHandler
}

// limitSpec is one limit checked on every request.
type limitSpec = keyopt.Limit[KeyPart]

func build(lim *throttle.Limiter, opts []Option) (*config, error) {
	c := &config{
		Config: keyopt.New(ErrInvalidOption, lim, DefaultName, IP()),
		header: XForwardedFor,
		v4Bits: 32,
		v6Bits: 64,
	}
	keyopt.Apply(&c.Config, opts, func(o Option) { o.apply(c) })
	// A policy name travels as a structured-field string in the headers
	// and as a JSON string in the problem body, and starts the store key.
	if err := c.Check("policy name", KeyPart.check); err != nil {
		return nil, err
	}
	return c, nil
}

// WithName sets the policy name of the limit given to New (DefaultName
// otherwise). Clients see it in the RateLimit headers; it also prefixes the
// limit's keys in the store.
func WithName(name string) Option {
	return optionFunc(func(c *config) { c.SetName(name) })
}

// WithKey sets what the limit given to New counts by: the parts are joined,
// so WithKey(IP(), Route()) gives each client its own allowance per route.
// The default is IP().
func WithKey(parts ...KeyPart) Option {
	return optionFunc(func(c *config) { c.SetKey(parts) })
}

// WithLimit adds a limit checked together with New's: a request passes
// only if every limit allows it, and is counted against all of them or
// none (throttle.AllowAll). All limiters must share one store. name
// identifies the limit in the headers; parts default to IP().
func WithLimit(name string, lim *throttle.Limiter, parts ...KeyPart) Option {
	return optionFunc(func(c *config) { c.AddLimit(name, lim, parts) })
}

// WithCost sets what a request costs (default 1), for example more for an
// expensive route. It applies to every limit. A cost above a limit's
// Limit is refused without Retry-After (it can never pass); a negative cost
// is a bug: the request gets 500 and the error goes to WithErrorHook.
func WithCost(cost func(*http.Request) int) Option {
	return optionFunc(func(c *config) {
		if cost == nil {
			c.Errorf("nil cost function")
			return
		}
		c.cost = cost
	})
}

// WithTrustedProxies names the proxies (addresses or CIDRs: "10.0.0.0/8",
// "192.0.2.7", "2001:db8::/32") whose forwarding header is believed. A
// request from one of them is keyed by the rightmost address of the
// forwarding header that is not a trusted proxy. Without trusted proxies
// forwarding headers are ignored: anyone can write them.
func WithTrustedProxies(cidrs ...string) Option {
	return optionFunc(func(c *config) {
		for _, s := range cidrs {
			p, err := netprefix.Parse(s)
			if err != nil {
				c.Errorf("trusted proxy %q: %v", s, err)
				continue
			}
			c.trustedProxies = append(c.trustedProxies, p)
		}
	})
}

// WithForwardingHeader says which header the trusted proxies write:
// XForwardedFor (the default) or Forwarded. Only that one is read: a proxy
// that appends to one does not sanitise the other, so reading both would
// let a client choose its own address.
func WithForwardingHeader(h ForwardingHeader) Option {
	return optionFunc(func(c *config) {
		if h != XForwardedFor && h != Forwarded {
			c.Errorf("unknown forwarding header %d", h)
			return
		}
		c.header = h
	})
}

// WithIPPrefix groups clients by network for IP(): IPv4 addresses by their
// first v4Bits (default 32: each address alone), IPv6 addresses by their
// first v6Bits (default 64, the size of one subscriber's network: anyone
// with one IPv6 address usually has 2^64 of them).
func WithIPPrefix(v4Bits, v6Bits int) Option {
	return optionFunc(func(c *config) {
		if v4Bits < 1 || v4Bits > 32 || v6Bits < 1 || v6Bits > 128 {
			c.Errorf("IP prefixes /%d and /%d: want 1–32 for IPv4 and 1–128 for IPv6", v4Bits, v6Bits)
			return
		}
		c.v4Bits, c.v6Bits = v4Bits, v6Bits
	})
}

// WithXRateLimitHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (seconds from now, not a Unix time) for clients that
// predate the IETF fields. With several limits they describe the strictest.
func WithXRateLimitHeaders() Option {
	return optionFunc(func(c *config) { c.xHeaders = true })
}

// WithFailOpen lets requests through, without rate-limit headers, when the
// store has an outage: the error wraps throttle.ErrUnavailable (Redis down
// or unreachable, a Redis timeout, WithStoreTimeout's bound). Any other
// store error still gets 503: a Redis set up wrong
// (throttle.ErrMisconfigured: a wrong password, no such database, a
// cluster node given as a single server, a script it cannot run), which
// no retry fixes and which would otherwise run unlimited for as long as
// nobody notices, and any error that is not known to be an outage.
// The default is to fail closed (WithFailClosed); giving both is an error.
// Either way the error goes to the hook of WithErrorHook.
func WithFailOpen() Option {
	return optionFunc(func(c *config) { c.FailOpen = true })
}

// WithFailClosed (the default, with one second) answers 503 Service
// Unavailable with Retry-After: retryAfter (rounded up to whole seconds)
// when the store fails.
func WithFailClosed(retryAfter time.Duration) Option {
	return optionFunc(func(c *config) { c.SetFailClosed(retryAfter, "Retry-After") })
}

// WithStoreTimeout bounds each decision of the store (a Redis round
// trip) to d; past it, the decision fails like any store error (see
// WithFailOpen). Without it, only the request's context and the Redis
// client's own timeouts bound a call: a hung server then holds every
// request for seconds. It costs a context and a timer per request.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.SetStoreTimeout(d) })
}

// WithErrorHook calls f with every store error, before failing open or
// closed, and with the error of a negative cost, so that they can be
// logged and counted. f must be
// safe for concurrent use.
func WithErrorHook(f func(r *http.Request, err error)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.Errorf("nil error hook")
			return
		}
		c.onError = f
	})
}

// WithRefusalHook calls f with the strictest decision of every refused
// request, before the response is written, so that refusals can be
// counted or logged. f must be safe for concurrent use.
func WithRefusalHook(f func(r *http.Request, d throttle.Decision)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.Errorf("nil refusal hook")
			return
		}
		c.onRefusal = f
	})
}

// WithDenyHandler replaces the default response to a refused request (429
// Too Many Requests with an RFC 9457 problem+json body naming the policies
// that refused). When f runs, the RateLimit headers and Retry-After
// are already set; d is the strictest refusal. f must write the status.
func WithDenyHandler(f func(w http.ResponseWriter, r *http.Request, d throttle.Decision)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.Errorf("nil deny handler")
			return
		}
		c.deny = f
	})
}

// A KeyPart is one component of a limit's key; see WithKey.
type KeyPart struct {
	kind    partKind
	header  string
	fromCtx func(context.Context) (string, bool)
	value   string
}

type partKind uint8

const (
	partIP partKind = iota + 1
	partHeader
	partRoute
	partContext
	partConst
)

// IP keys by the client's address (see WithTrustedProxies), grouped by
// network (see WithIPPrefix).
func IP() KeyPart { return KeyPart{kind: partIP} }

// Header keys by a request header's value, such as an API key. A request
// without the header is keyed by its client IP instead, so that leaving
// the header out does not escape the limit.
func Header(name string) KeyPart {
	return KeyPart{kind: partHeader, header: http.CanonicalHeaderKey(name)}
}

// Route keys by the pattern that matched the request (Request.Pattern, set
// by http.ServeMux when the middleware wraps a handler registered on it),
// else by the URL path.
func Route() KeyPart { return KeyPart{kind: partRoute} }

// FromContext keys by a value the authentication middleware put in the
// request's context, such as a user ID; f returns false for an anonymous
// request, which is then keyed by its client IP.
func FromContext(f func(context.Context) (string, bool)) KeyPart {
	return KeyPart{kind: partContext, fromCtx: f}
}

// Global gives every request the same key: one allowance shared by all
// clients (a limit on the whole service or route).
func Global() KeyPart { return KeyPart{kind: partConst, value: "*"} }

// isToken reports whether s is an RFC 9110 token, what a header name is.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// check reports what is wrong with a part ("" if nothing): the zero
// KeyPart, an empty header name or one no request can carry (a typo would
// key every request by its IP, unnoticed), a nil context function.
func (kp KeyPart) check() string {
	switch kp.kind {
	case partIP, partRoute, partConst:
		return ""
	case partHeader:
		if kp.header == "" {
			return "Header needs a header name"
		}
		if !isToken(kp.header) {
			return fmt.Sprintf("Header(%q): not a header name (RFC 9110 token characters only)", kp.header)
		}
		return ""
	case partContext:
		if kp.fromCtx == nil {
			return "FromContext needs a function"
		}
		return ""
	}
	return "a zero KeyPart (use IP, Header, Route, FromContext or Global)"
}
