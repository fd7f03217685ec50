// Package httplimit is net/http middleware over the keyed limiters of
// package throttle: it answers 429 Too Many Requests to a client that is
// over its limit and tells every client where it stands.
//
// New(lim, options...) returns a func(http.Handler) http.Handler, so it
// fits net/http, chi, gorilla/mux and anything else built on handlers.
// Each request is keyed (by default by the client's IP address, IPv6
// grouped by /64), checked against the limiter and against any further
// limits added with WithLimit, all in one atomic call (throttle.AllowAll),
// and costs 1 unless WithCost says otherwise.
//
// What it gets right that the usual middlewares get wrong:
//
//   - The client IP is RemoteAddr. X-Forwarded-For (or RFC 7239 Forwarded)
//     is read only from configured trusted proxies, from the right, and the
//     first address that is not a trusted proxy is the client: a client
//     cannot choose its own key by sending the header.
//   - Every response carries the IETF RateLimit-Policy and RateLimit fields
//     (draft-ietf-httpapi-ratelimit-headers, `"default";q=100;w=60` and
//     `"default";r=42;t=17`); X-RateLimit-* on request, with the reset in
//     seconds from now, not a Unix time.
//   - A refusal has Retry-After in whole seconds, rounded up from the
//     limiter's exact wait, so a client that honours it is admitted on its
//     next try; it is never earlier than the t the RateLimit field
//     announces. The body is an RFC 9457 problem (quota-exceeded).
//   - A store failure (Redis down) never panics and never answers 500: the
//     error goes to a hook, and the request fails closed (503 with
//     Retry-After, the default) or open, as configured. Only an outage
//     fails open: a Redis set up wrong (a wrong password, say) gets 503
//     whatever the setting (see WithFailOpen).
//   - An allowed request costs the middleware two allocations (its key and
//     one block holding all the header values); header names and the
//     policy field are computed once.
//
// WithDecisionHandler hands every decided request, with its keys and
// decisions, to a handler of the caller's: `ratelimit proxy` uses it to
// hold excess requests as nginx's limit_req does instead of refusing them.
//
// docs/http.md shows the middleware in a program, the `ratelimit proxy`
// command that puts it in front of any service, and how to key clients
// safely behind a load balancer.
//
// # Options
//
// The module's one convention: a nil option, an option with an invalid
// value and options that contradict each other (WithFailOpen and
// WithFailClosed) are errors returned by New, wrapping ErrInvalidOption.
package httplimit
