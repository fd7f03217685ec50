package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/smoothrate/ratelimit/internal/keyopt"
	"github.com/smoothrate/ratelimit/throttle"
)

// Metadata keys of the answers: the IETF RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) and Retry-After, lower-case as
// gRPC metadata keys are.
const (
	MDPolicy     = "ratelimit-policy"
	MDRateLimit  = "ratelimit"
	MDRetryAfter = "retry-after"
)

// Interceptor limits the calls of a gRPC server: Unary and Stream give its
// interceptors, and Limit makes it a go-grpc-middleware ratelimit.Limiter.
// Make one with New; it is safe for concurrent use.
type Interceptor struct {
	c      *config
	policy string   // ratelimit-policy, the same on every answer
	quoted []string // each limit's name as a structured-field string
}

// New returns an Interceptor that admits a call only if lim (and every
// limit added with WithLimit) allows it. Errors wrap ErrInvalidOption.
func New(lim *throttle.Limiter, opts ...Option) (*Interceptor, error) {
	c, err := build(lim, opts)
	if err != nil {
		return nil, err
	}
	return &Interceptor{c: c, policy: keyopt.Policy(c.Limits), quoted: keyopt.Quoted(c.Limits)}, nil
}

// Unary returns the unary server interceptor.
func (in *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if in.c.skip != nil && in.c.skip(ctx, info.FullMethod) {
			return handler(ctx, req)
		}
		md, err := in.check(ctx, info.FullMethod)
		if md != nil {
			// Fails only when headers were already sent, which no
			// handler has done yet.
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor. A stream is checked once,
// when it opens: its messages are not counted.
func (in *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if in.c.skip != nil && in.c.skip(ctx, info.FullMethod) {
			return handler(srv, ss)
		}
		md, err := in.check(ctx, info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// Limit decides a call from its server context alone, the method taken
// from grpc.Method(ctx): the method set of go-grpc-middleware v2's
// interceptors/ratelimit.Limiter, so an *Interceptor can be passed to its
// UnaryServerInterceptor and StreamServerInterceptor. It sets the
// RateLimit metadata on the call and returns nil when the call may
// proceed, or an error whose text says why not; status.FromError on the
// error gives the full status this package's own interceptors return,
// RetryInfo included (go-grpc-middleware keeps only the text).
func (in *Interceptor) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	if in.c.skip != nil && in.c.skip(ctx, method) {
		return nil
	}
	md, err := in.check(ctx, method)
	if md != nil {
		_ = grpc.SetHeader(ctx, md)
	}
	if err != nil {
		return limitError{status.Convert(err)}
	}
	return nil
}

// limitError carries a status for callers of Limit; its text is the
// status's message alone, since go-grpc-middleware wraps it in a status of
// its own.
type limitError struct{ st *status.Status }

func (e limitError) Error() string              { return e.st.Message() }
func (e limitError) GRPCStatus() *status.Status { return e.st }

// check decides a call. It returns the metadata to send (nil for none)
// and the status error to answer with, or nil to let the call proceed.
func (in *Interceptor) check(ctx context.Context, method string) (metadata.MD, error) {
	c := in.c
	cost := 1
	if c.cost != nil {
		if cost = c.cost(ctx, method); cost < 0 {
			err := fmt.Errorf("%w: WithCost returned %d for %s", throttle.ErrInvalidCost, cost, method)
			if c.onError != nil {
				c.onError(ctx, method, err)
			}
			return nil, status.Error(codes.Internal, "grpclimit: invalid cost")
		}
	}
	ds, err := in.decide(ctx, method, cost)
	if err != nil {
		err = c.StoreError(ctx, err) // WithStoreTimeout's bound is an outage
		if ctx.Err() != nil && !errors.Is(err, throttle.ErrUnavailable) {
			// The caller gave up: nothing is known of the store, and
			// the error hook (an outage's log, a store-error counter)
			// hears nothing of it.
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if c.onError != nil {
			c.onError(ctx, method, err)
		}
		if !errors.Is(err, throttle.ErrUnavailable) {
			// Redis set up wrong, or a failure not known to be an
			// outage: never pass (failing open would run unlimited
			// until someone notices), and not Unavailable either,
			// which clients retry as transient.
			return nil, status.Error(codes.Internal, "the rate limit could not be checked: its store is not set up right")
		}
		if c.FailOpen {
			return nil, nil
		}
		md := metadata.MD{MDRetryAfter: {strconv.FormatInt(max(keyopt.CeilSeconds(c.ClosedRetry), 1), 10)}}
		st, _ := status.New(codes.Unavailable, "the rate limit could not be checked; retry later").
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(c.ClosedRetry)})
		return md, st.Err()
	}
	allowed := throttle.Decisions(ds).Allowed()
	md := metadata.MD{MDPolicy: {in.policy}, MDRateLimit: {in.rateLimit(ds, allowed)}}
	if allowed {
		return md, nil
	}
	if c.onRefusal != nil {
		c.onRefusal(ctx, method, throttle.Decisions(ds).Strictest())
	}
	return md, in.refusal(md, ds)
}

// decide asks the store about every limit, in one call.
func (in *Interceptor) decide(ctx context.Context, method string, cost int) ([]throttle.Decision, error) {
	ctx, cancel := in.c.Bound(ctx) // WithStoreTimeout
	defer cancel()
	limits := in.c.Limits
	var arr [128]byte
	if len(limits) == 1 {
		key := string(appendKey(arr[:0], &limits[0], ctx, method))
		d, err := limits[0].Lim.AllowN(ctx, key, cost)
		return []throttle.Decision{d}, err
	}
	checks := make([]throttle.Check, len(limits))
	for i := range limits {
		checks[i] = throttle.Check{Limiter: limits[i].Lim, Key: string(appendKey(arr[:0], &limits[i], ctx, method)), N: cost}
	}
	return throttle.AllowAll(ctx, checks...)
}

// rateLimit is the ratelimit field, as httplimit writes it
// (keyopt.AppendRateLimit).
func (in *Interceptor) rateLimit(ds []throttle.Decision, allowed bool) string {
	return string(keyopt.AppendRateLimit(nil, in.quoted, ds, allowed))
}

// refusal is the ResourceExhausted status of a refused call: a RetryInfo
// with the longest wait of the limits that refused (none when one of them
// can never pass), a QuotaFailure naming them, and retry-after in md.
func (in *Interceptor) refusal(md metadata.MD, ds []throttle.Decision) error {
	var wait time.Duration
	never := false
	qf := &errdetails.QuotaFailure{}
	for i, d := range ds {
		if d.Allowed {
			continue
		}
		desc := "over the limit"
		if d.RetryAfter == throttle.Never {
			never = true
			desc = "the call costs more than the limit allows at once"
		} else {
			wait = max(wait, d.RetryAfter)
		}
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{Subject: in.c.Limits[i].Name, Description: desc})
	}
	var st *status.Status
	if never {
		st, _ = status.New(codes.ResourceExhausted, "rate limit: the call costs more than the limit allows at once").WithDetails(qf)
	} else {
		md[MDRetryAfter] = []string{strconv.FormatInt(max(keyopt.CeilSeconds(wait), 1), 10)}
		st, _ = status.New(codes.ResourceExhausted, "rate limit exceeded; retry after "+wait.String()).
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}, qf)
	}
	return st.Err()
}
