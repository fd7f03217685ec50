package grpclimit

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/throttle"
)

// serve starts a real gRPC server on a loopback port (not bufconn: the
// peer address must be a real one) with the health service, whose Check is
// unary and Watch a server stream, behind opts' interceptors, and returns a
// client of it. Both stop when the test ends.
func serve(t *testing.T, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func serveWith(t *testing.T, in *Interceptor) healthpb.HealthClient {
	return serve(t, grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
}

func newLimiter(t *testing.T, store throttle.Store, l throttle.Limit) *throttle.Limiter {
	t.Helper()
	lim, err := throttle.New(store, throttle.GCRA, l)
	require.NoError(t, err)
	return lim
}

// check calls Check and returns its error and the header metadata.
func check(t *testing.T, c healthpb.HealthClient, ctx context.Context) (metadata.MD, error) {
	t.Helper()
	var md metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	return md, err
}

func retryInfo(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// TestUnaryRefusal: two calls an hour per peer. The first two pass with
// the RateLimit metadata; the third is ResourceExhausted with the exact
// wait in RetryInfo, the same wait rounded up in retry-after, and a
// QuotaFailure naming the limit.
func TestUnaryRefusal(t *testing.T) {
	var refused []throttle.Decision
	in, err := New(newLimiter(t, memStore(t), throttle.PerHour(2)),
		WithRefusalHook(func(_ context.Context, m string, d throttle.Decision) { refused = append(refused, d) }))
	require.NoError(t, err)
	c := serveWith(t, in)
	ctx := t.Context()

	md, err := check(t, c, ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=2;w=3600`}, md.Get(MDPolicy))
	assert.Equal(t, []string{`"default";r=1;t=1800`}, md.Get(MDRateLimit))
	assert.Empty(t, md.Get(MDRetryAfter))

	md, err = check(t, c, ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";r=0;t=3600`}, md.Get(MDRateLimit))

	md, err = check(t, c, ctx)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	ri, qf := retryInfo(t, err)
	require.NotNil(t, ri, "no RetryInfo in %v", err)
	// GCRA at 2/h: the next call fits 30 minutes after the first one.
	wait := ri.RetryDelay.AsDuration()
	assert.True(t, wait > 29*time.Minute && wait <= 30*time.Minute, "RetryInfo %v", wait)
	require.NotNil(t, qf)
	require.Len(t, qf.Violations, 1)
	assert.Equal(t, DefaultName, qf.Violations[0].Subject)
	assert.Equal(t, []string{"1800"}, md.Get(MDRetryAfter))
	assert.Equal(t, []string{`"default";r=0;t=1800`}, md.Get(MDRateLimit))
	assert.Equal(t, []string{`"default";q=2;w=3600`}, md.Get(MDPolicy))
	require.Len(t, refused, 1)
	assert.False(t, refused[0].Allowed)
}

// TestStream: a stream is checked when it opens; a refused one fails at
// its first Recv with ResourceExhausted, and the metadata comes in its
// header.
func TestStream(t *testing.T) {
	in, err := New(newLimiter(t, memStore(t), throttle.PerHour(1)))
	require.NoError(t, err)
	c := serveWith(t, in)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.NoError(t, err)
	md, err := s.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";r=0;t=3600`}, md.Get(MDRateLimit))

	s2, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = s2.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	ri, _ := retryInfo(t, err)
	require.NotNil(t, ri)
	md, err = s2.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{"3600"}, md.Get(MDRetryAfter))
}

// TestKeys: Metadata keys by the value (each API key its own allowance),
// falling back to the peer when the client sends none; Method keys by the
// method; Func by what it returns.
func TestKeys(t *testing.T) {
	store := memStore(t)
	in, err := New(newLimiter(t, store, throttle.PerHour(1)), WithKey(Metadata("X-Api-Key")))
	require.NoError(t, err)
	c := serveWith(t, in)
	withKey := func(k string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "x-api-key", k)
	}
	_, err = check(t, c, withKey("a"))
	require.NoError(t, err)
	_, err = check(t, c, withKey("a"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	_, err = check(t, c, withKey("b"))
	require.NoError(t, err, "another API key has its own allowance")
	_, err = check(t, c, t.Context())
	require.NoError(t, err, "no API key: the peer's allowance")
	_, err = check(t, c, t.Context())
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "no API key twice: the peer's allowance is spent")

	in, err = New(newLimiter(t, store, throttle.PerHour(1)), WithName("per-method"), WithKey(Method()))
	require.NoError(t, err)
	c = serveWith(t, in)
	_, err = check(t, c, t.Context())
	require.NoError(t, err)
	_, err = check(t, c, t.Context())
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	s, err := c.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.NoError(t, err, "Watch is another method: its own allowance")

	var seen []string
	in, err = New(newLimiter(t, store, throttle.PerHour(1)), WithName("fn"), WithKey(Func(func(ctx context.Context, m string) (string, bool) {
		seen = append(seen, m)
		md, _ := metadata.FromIncomingContext(ctx)
		u := md.Get("user")
		return strings.Join(u, ""), len(u) > 0
	})))
	require.NoError(t, err)
	c = serveWith(t, in)
	user := func(u string) context.Context { return metadata.AppendToOutgoingContext(t.Context(), "user", u) }
	_, err = check(t, c, user("ann"))
	require.NoError(t, err)
	_, err = check(t, c, user("bob"))
	require.NoError(t, err)
	_, err = check(t, c, user("ann"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, "/grpc.health.v1.Health/Check", seen[0])
}

// TestSeveralLimits: a call is counted against both limits or neither; the
// refusal names only the limit that refused.
func TestSeveralLimits(t *testing.T) {
	store := memStore(t)
	in, err := New(newLimiter(t, store, throttle.PerHour(3)), WithName("client"),
		WithLimit("api-key", newLimiter(t, store, throttle.PerHour(1)), Metadata("x-api-key")))
	require.NoError(t, err)
	c := serveWith(t, in)
	key := func(k string) context.Context { return metadata.AppendToOutgoingContext(t.Context(), "x-api-key", k) }
	md, err := check(t, c, key("a"))
	require.NoError(t, err)
	assert.Equal(t, []string{`"client";q=3;w=3600, "api-key";q=1;w=3600`}, md.Get(MDPolicy))
	assert.Equal(t, []string{`"client";r=2;t=1200, "api-key";r=0;t=3600`}, md.Get(MDRateLimit))
	md, err = check(t, c, key("a"))
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	_, qf := retryInfo(t, err)
	require.Len(t, qf.Violations, 1)
	assert.Equal(t, "api-key", qf.Violations[0].Subject)
	// Not counted against "client": it still has 2.
	md, err = check(t, c, key("b"))
	require.NoError(t, err)
	assert.Equal(t, []string{`"client";r=1;t=2400, "api-key";r=0;t=3600`}, md.Get(MDRateLimit))
}

// TestCost: a call costing more than the limit is refused without
// RetryInfo (waiting does not help); a negative cost is Internal and goes
// to the error hook.
func TestCost(t *testing.T) {
	var hooked []error
	in, err := New(newLimiter(t, memStore(t), throttle.PerHour(5)),
		WithCost(func(ctx context.Context, m string) int {
			md, _ := metadata.FromIncomingContext(ctx)
			switch strings.Join(md.Get("cost"), "") {
			case "big":
				return 6
			case "neg":
				return -1
			}
			return 1
		}),
		WithErrorHook(func(_ context.Context, _ string, err error) { hooked = append(hooked, err) }))
	require.NoError(t, err)
	c := serveWith(t, in)
	cost := func(v string) context.Context { return metadata.AppendToOutgoingContext(t.Context(), "cost", v) }
	md, err := check(t, c, cost("big"))
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	ri, qf := retryInfo(t, err)
	assert.Nil(t, ri)
	require.Len(t, qf.Violations, 1)
	assert.Empty(t, md.Get(MDRetryAfter))
	assert.Equal(t, []string{`"default";r=5`}, md.Get(MDRateLimit))

	_, err = check(t, c, cost("neg"))
	assert.Equal(t, codes.Internal, status.Code(err))
	require.Len(t, hooked, 1)
	assert.ErrorIs(t, hooked[0], throttle.ErrInvalidCost)
	_, err = check(t, c, cost("one"))
	require.NoError(t, err)
}

// deadRedis is a Redis store whose server does not exist: every decision
// fails.
func deadRedis(t *testing.T) throttle.Store {
	client := redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	store, err := throttle.NewRedisStore(client)
	require.NoError(t, err)
	return store
}

func memStore(t *testing.T) *throttle.MemoryStore {
	t.Helper()
	s, err := throttle.NewMemoryStore()
	require.NoError(t, err)
	return s
}

// TestStoreFailure: by default a failed store fails closed with
// Unavailable and a RetryInfo (never ResourceExhausted: the client is not
// over its limit); WithFailOpen lets the call through without metadata.
// Both report the error to the hook.
func TestStoreFailure(t *testing.T) {
	store := deadRedis(t)
	var hooked int
	hook := WithErrorHook(func(_ context.Context, _ string, err error) {
		hooked++
		assert.ErrorIs(t, err, throttle.ErrStore)
	})
	in, err := New(newLimiter(t, store, throttle.PerHour(5)), hook, WithFailClosed(3*time.Second), WithStoreTimeout(time.Second))
	require.NoError(t, err)
	md, err := check(t, serveWith(t, in), t.Context())
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	ri, _ := retryInfo(t, err)
	require.NotNil(t, ri)
	assert.Equal(t, 3*time.Second, ri.RetryDelay.AsDuration())
	assert.Equal(t, []string{"3"}, md.Get(MDRetryAfter))
	assert.Equal(t, 1, hooked)

	in, err = New(newLimiter(t, store, throttle.PerHour(5)), hook, WithFailOpen())
	require.NoError(t, err)
	md, err = check(t, serveWith(t, in), t.Context())
	require.NoError(t, err)
	assert.Empty(t, md.Get(MDRateLimit))
	assert.Equal(t, 2, hooked)
}

// TestSkip: skipped methods are neither counted nor given metadata.
func TestSkip(t *testing.T) {
	in, err := New(newLimiter(t, memStore(t), throttle.PerHour(1)),
		WithSkip(func(_ context.Context, m string) bool { return m == "/grpc.health.v1.Health/Check" }))
	require.NoError(t, err)
	c := serveWith(t, in)
	for range 3 {
		md, err := check(t, c, t.Context())
		require.NoError(t, err)
		assert.Empty(t, md.Get(MDRateLimit))
	}
	s, err := c.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.NoError(t, err, "Watch is not skipped and has its one call")
}

// middlewareLimiter has the method set of go-grpc-middleware v2's
// interceptors/ratelimit.Limiter. Go interfaces are satisfied by their
// method set, so this assertion is the proof that an *Interceptor can be
// passed to that package, without making it a dependency of the module.
type middlewareLimiter interface {
	Limit(ctx context.Context) error
}

var _ middlewareLimiter = (*Interceptor)(nil)

// middlewareUnary does what go-grpc-middleware's UnaryServerInterceptor
// does with a Limiter: call Limit with the server's context and turn an
// error into ResourceExhausted with the error's text.
func middlewareUnary(l middlewareLimiter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.Limit(ctx); err != nil {
			return nil, status.Errorf(codes.ResourceExhausted, "%s is rejected: %s", info.FullMethod, err)
		}
		return handler(ctx, req)
	}
}

// TestLimitAdapter: behind go-grpc-middleware's interceptor, Limit still
// sees the method (grpc.Method), the metadata and the peer, sets the
// RateLimit metadata, and returns an error that carries our full status.
func TestLimitAdapter(t *testing.T) {
	in, err := New(newLimiter(t, memStore(t), throttle.PerHour(1)), WithKey(Method(), Metadata("x-api-key")))
	require.NoError(t, err)
	c := serve(t, grpc.ChainUnaryInterceptor(middlewareUnary(in)))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "a")
	md, err := check(t, c, ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";r=0;t=3600`}, md.Get(MDRateLimit))
	md, err = check(t, c, ctx)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "rate limit exceeded; retry after")
	assert.Equal(t, []string{"3600"}, md.Get(MDRetryAfter))
	_, err = check(t, c, metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "b"))
	require.NoError(t, err, "the key holds the metadata value")

	// Called directly, Limit's error converts to our full status.
	ctx = grpc.NewContextWithServerTransportStream(t.Context(), fakeStream("/svc/M"))
	require.NoError(t, in.Limit(ctx))
	err = in.Limit(ctx)
	require.Error(t, err)
	ri, _ := retryInfo(t, err)
	require.NotNil(t, ri)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}

// fakeStream is the least a context needs for grpc.Method and SetHeader.
type fakeStream string

func (s fakeStream) Method() string                { return string(s) }
func (fakeStream) SetHeader(metadata.MD) error     { return nil }
func (fakeStream) SendHeader(metadata.MD) error    { return nil }
func (fakeStream) SetTrailer(md metadata.MD) error { return nil }

// TestOptionErrors: every bad option is an error wrapping ErrInvalidOption,
// all of them reported at once.
func TestOptionErrors(t *testing.T) {
	lim := newLimiter(t, memStore(t), throttle.PerHour(1))
	for _, tc := range []struct {
		name string
		lim  *throttle.Limiter
		opts []Option
		want string
	}{
		{"nil limiter", nil, nil, "nil limiter"},
		{"nil option", lim, []Option{nil}, "nil option"},
		{"bad name", lim, []Option{WithName("a:b")}, `limit name "a:b"`},
		{"empty name", lim, []Option{WithName("")}, `limit name ""`},
		{"same name", lim, []Option{WithLimit(DefaultName, lim)}, "two limits named"},
		{"no parts", lim, []Option{WithKey()}, "at least one part"},
		{"zero part", lim, []Option{WithKey(KeyPart{})}, "zero KeyPart"},
		{"empty metadata", lim, []Option{WithKey(Metadata(""))}, "metadata key"},
		{"metadata with a space", lim, []Option{WithKey(Metadata("x api key"))}, "not a metadata key"},
		{"metadata with a colon", lim, []Option{WithKey(Metadata("x-api-key:"))}, "not a metadata key"},
		{"two stores", lim, []Option{WithLimit("other", newLimiter(t, memStore(t), throttle.PerHour(1)))}, "another store"},
		{"nil func", lim, []Option{WithKey(Func(nil))}, "needs a function"},
		{"nil cost", lim, []Option{WithCost(nil)}, "nil cost"},
		{"nil skip", lim, []Option{WithSkip(nil)}, "nil skip"},
		{"nil hook", lim, []Option{WithErrorHook(nil)}, "nil error hook"},
		{"nil refusal hook", lim, []Option{WithRefusalHook(nil)}, "nil refusal hook"},
		{"bad closed retry", lim, []Option{WithFailClosed(0)}, "must be positive"},
		{"open and closed", lim, []Option{WithFailOpen(), WithFailClosed(time.Second)}, "contradict"},
		{"bad timeout", lim, []Option{WithStoreTimeout(-1)}, "must be positive"},
		{"nil extra limiter", lim, []Option{WithLimit("x", nil)}, `nil limiter for limit "x"`},
	} {
		in, err := New(tc.lim, tc.opts...)
		assert.Nil(t, in, tc.name)
		assert.True(t, errors.Is(err, ErrInvalidOption), "%s: %v", tc.name, err)
		assert.ErrorContains(t, err, tc.want, tc.name)
	}
}
