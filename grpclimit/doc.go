// Package grpclimit is gRPC server middleware over the keyed limiters of
// package throttle: it refuses a call from a client that is over its limit
// with codes.ResourceExhausted and tells every client where it stands.
//
// New(lim, options...) returns an *Interceptor; register its Unary and
// Stream interceptors with the server:
//
//	in, err := grpclimit.New(lim, grpclimit.WithKey(grpclimit.Metadata("x-api-key")))
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
//
// A call is keyed by the parts given to WithKey (by default the peer's IP
// address): the method (Method), the peer (Peer), a metadata value such as
// an API key (Metadata, which falls back to the peer when the client sends
// none, so that leaving it out does not escape the limit), or a function of
// the context (Func). A stream is checked once, when it opens, not per
// message. Further limits (WithLimit) are checked in the same atomic step
// (throttle.AllowAll): a call is counted against all of them or none.
//
// What the client sees:
//
//   - A refusal is codes.ResourceExhausted with a google.rpc.RetryInfo
//     detail holding the limiter's exact wait (errdetails.RetryInfo, which
//     gRPC's retry policies and most clients read) and a
//     google.rpc.QuotaFailure naming the limits that refused. A call that
//     costs more than a limit allows at once has no RetryInfo: waiting does
//     not help.
//   - Every answer, allowed or refused, carries the IETF RateLimit fields as
//     response header metadata, with the same values httplimit writes:
//     "ratelimit-policy" (`"default";q=100;w=60`), "ratelimit"
//     (`"default";r=42;t=17`), and "retry-after" (whole seconds, rounded
//     up) on a refusal.
//   - A store failure (Redis down, a timeout: see WithStoreTimeout) fails
//     closed by default: codes.Unavailable with a RetryInfo of one second
//     (WithFailClosed changes it), so that a limit is never silently
//     lifted. WithFailOpen lets calls through instead, on an outage
//     only: a Redis set up wrong (a wrong password, say) is answered
//     codes.Internal whatever the setting (see WithFailOpen). Either way
//     the error goes to WithErrorHook.
//
// For go-grpc-middleware's interceptors/ratelimit, whose Limiter interface
// is Limit(ctx) error, an *Interceptor is such a Limiter as it is: pass it
// to ratelimit.UnaryServerInterceptor. That interceptor sees neither the
// method nor the metadata, but Limit reads both from the server's context,
// so every key part works; what it loses is the RetryInfo detail (it turns
// any error into ResourceExhausted with the error's text), and store
// failures become ResourceExhausted too.
package grpclimit
