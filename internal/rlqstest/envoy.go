// Package rlqstest is a client of Envoy's Rate Limit Quota Service for
// tests: Envoy, which behaves as the rate_limit_quota HTTP filter of Envoy
// 1.36 does (its global client,
// source/extensions/filters/http/rate_limit_quota/global_client_impl.cc,
// and filter.cc), so that a server is tested against what Envoys will do
// with its answers, not against what the protocol's comments promise.
// What it copies:
//
//   - A request matched into a bucket the client does not have yet is
//     decided by the no-assignment behaviour (allowed unless it is a
//     blanket DENY_ALL), creates the bucket, opens the stream if there is
//     none, and is reported at once, alone, with a time_elapsed of 0.
//   - Every reporting interval, one message reports every bucket: the
//     requests allowed and denied since the last report, and the time
//     since it in whole seconds (Envoy truncates to seconds). With no
//     stream it tries to open one; if that fails the counts are lost.
//   - A token bucket assignment replaces the bucket's limiter unless its
//     max_tokens, tokens_per_fill and fill_interval nanoseconds equal the
//     one it runs (fill_interval's seconds are not compared); a new
//     limiter starts full and refills continuously at tokens_per_fill /
//     whole seconds of fill_interval. A blanket rule allows or denies
//     all; requests_per_time_unit is ignored (Envoy logs it as not
//     supported).
//   - An assignment's time to live counts in whole seconds (0, or less
//     than a second, expires it at once). On expiry the bucket runs the
//     expired-assignment fallback, if configured, for its timeout (whole
//     seconds), then the no-assignment behaviour.
//   - An abandon action erases the bucket; the next request creates it
//     anew. Assignments for buckets the client does not have are ignored.
//   - A stream the server ends is dropped; the next report opens another.
//
// Time is the time package's: tests run it in a testing/synctest bubble
// with a server on the in-memory Network, or on the real clock against a
// server in another process (the `ratelimit rlqs` binary) reached with
// Dial. Drive sends an Envoy's requests at a steady rate.
package rlqstest

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config is what an Envoy's rate_limit_quota filter is configured with.
type Config struct {
	// Domain is the filter's domain.
	Domain string
	// ReportingInterval is the buckets' reporting_interval (default 1 s).
	ReportingInterval time.Duration
	// NoAssignment is the no_assignment_behavior's fallback_rate_limit: a
	// blanket rule (nil: ALLOW_ALL).
	NoAssignment *typev3.RateLimitStrategy
	// Expired is the expired_assignment_behavior's fallback_rate_limit
	// (nil: none: back to the no-assignment behaviour at once), run for
	// ExpiredTimeout (expired_assignment_behavior_timeout).
	Expired        *typev3.RateLimitStrategy
	ExpiredTimeout time.Duration
}

// Envoy is one Envoy's filter: its buckets, its stream to the server, its
// reporting timer. Make one with New; Close it.
type Envoy struct {
	cfg    Config
	client rlqsv3.RateLimitQuotaServiceClient
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	buckets map[string]*bucket
	stream  rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	timer   bool // the reporting timer runs
	closed  bool
	totals  map[string]*Totals // survive abandons
	// Streams counts the streams opened.
	streams int
}

// bucket is one cached bucket (Envoy's CachedBucket).
type bucket struct {
	id      map[string]string
	allowed uint64
	denied  uint64
	last    time.Time // last report
	// action is the assignment (or expired fallback) in force; nil: the
	// no-assignment behaviour.
	action   *typev3.RateLimitStrategy
	limiter  *tokenBucket
	fallback bool        // action is the expired fallback
	expiry   *time.Timer // of the assignment or of the fallback
	gen      int         // which expiry timer is current
}

// Totals are what one bucket of one Envoy did, since New.
type Totals struct {
	Allowed, Denied uint64
	// Assignments counts the assignment actions received, Abandons the
	// abandon actions, Expiries the assignments that expired, ZeroTTL
	// the assignments received with a time to live of 0 (a server
	// stopping), which expire at once.
	Assignments, Abandons, Expiries, ZeroTTL int
	// TokenBuckets counts the limiters made (a token bucket applied
	// anew), Capacity sums their max_tokens: what they could admit at
	// once, beyond their rates.
	TokenBuckets int
	Capacity     uint64
}

// New returns an Envoy that opens its stream on conn (at its first
// request).
func New(conn grpc.ClientConnInterface, cfg Config) *Envoy {
	if cfg.ReportingInterval == 0 {
		cfg.ReportingInterval = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Envoy{cfg: cfg, client: rlqsv3.NewRateLimitQuotaServiceClient(conn), ctx: ctx, cancel: cancel,
		buckets: map[string]*bucket{}, totals: map[string]*Totals{}}
}

func key(id map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(id)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(id[k])
		b.WriteByte(0)
	}
	return b.String()
}

// Request decides one request matched into the bucket id, now, and counts
// it for the next report.
func (e *Envoy) Request(id map[string]string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	k := key(id)
	tot := e.totals[k]
	if tot == nil {
		tot = &Totals{}
		e.totals[k] = tot
	}
	b := e.buckets[k]
	if b == nil {
		allow := !isBlanket(e.cfg.NoAssignment, typev3.RateLimitStrategy_DENY_ALL)
		b = &bucket{id: maps.Clone(id), last: time.Now()}
		e.count(b, tot, allow)
		e.buckets[k] = b
		if !e.timer {
			e.timer = true
			e.wg.Add(1)
			go e.reportLoop()
		}
		e.send(&rlqsv3.RateLimitQuotaUsageReports{Domain: e.cfg.Domain,
			BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{e.usage(b)}})
		return allow
	}
	action := b.action
	if action == nil {
		action = e.cfg.NoAssignment
	}
	allow := true
	switch {
	case action == nil:
	case action.GetTokenBucket() != nil:
		allow = b.limiter.consume(time.Now())
	case action.GetStrategy() != nil && action.GetRequestsPerTimeUnit() == nil:
		allow = action.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL
	}
	e.count(b, tot, allow)
	return allow
}

func (e *Envoy) count(b *bucket, tot *Totals, allow bool) {
	if allow {
		b.allowed++
		tot.Allowed++
	} else {
		b.denied++
		tot.Denied++
	}
}

func isBlanket(s *typev3.RateLimitStrategy, rule typev3.RateLimitStrategy_BlanketRule) bool {
	_, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return ok && s.GetBlanketRule() == rule
}

// usage takes b's counts for a report, as Envoy's getUsageFromBucket.
func (e *Envoy) usage(b *bucket) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	now := time.Now()
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqsv3.BucketId{Bucket: maps.Clone(b.id)},
		NumRequestsAllowed: b.allowed,
		NumRequestsDenied:  b.denied,
		TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.last) / time.Second)},
	}
	b.allowed, b.denied, b.last = 0, 0, now
	return u
}

// send sends m on the stream, opening one if there is none; called with
// e.mu held. Reports that cannot be sent are lost, as in Envoy.
func (e *Envoy) send(m *rlqsv3.RateLimitQuotaUsageReports) {
	if e.stream == nil {
		s, err := e.client.StreamRateLimitQuotas(e.ctx)
		if err != nil {
			return
		}
		e.stream = s
		e.streams++
		e.wg.Add(1)
		go e.recvLoop(s)
	}
	if err := e.stream.Send(m); err != nil {
		e.stream = nil
	}
}

func (e *Envoy) reportLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.ReportingInterval)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
		}
		e.mu.Lock()
		if len(e.buckets) > 0 {
			m := &rlqsv3.RateLimitQuotaUsageReports{Domain: e.cfg.Domain}
			for _, k := range slices.Sorted(maps.Keys(e.buckets)) {
				m.BucketQuotaUsages = append(m.BucketQuotaUsages, e.usage(e.buckets[k]))
			}
			e.send(m)
		}
		e.mu.Unlock()
	}
}

func (e *Envoy) recvLoop(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	defer e.wg.Done()
	for {
		r, err := s.Recv()
		if err != nil {
			e.mu.Lock()
			if e.stream == s {
				e.stream = nil // the next report opens another
			}
			e.mu.Unlock()
			return
		}
		e.mu.Lock()
		for _, a := range r.GetBucketAction() {
			e.apply(a)
		}
		e.mu.Unlock()
	}
}

// apply applies one action, as Envoy's onQuotaResponseImpl; e.mu held.
func (e *Envoy) apply(a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	if len(a.GetBucketId().GetBucket()) == 0 {
		return
	}
	k := key(a.GetBucketId().GetBucket())
	b := e.buckets[k]
	if b == nil {
		return // a bucket it does not have: ignored
	}
	tot := e.totals[k]
	if a.GetAbandonAction() != nil {
		tot.Abandons++
		e.stopExpiry(b)
		delete(e.buckets, k)
		return
	}
	qa := a.GetQuotaAssignmentAction()
	if qa == nil {
		return
	}
	s := qa.GetRateLimitStrategy()
	switch {
	case s.GetTokenBucket() != nil:
		e.setLimiter(b, tot, s)
	case s.GetRequestsPerTimeUnit() != nil, s.GetStrategy() == nil:
		return // not supported: the action is skipped
	default:
		b.limiter = nil
	}
	tot.Assignments++
	if qa.GetAssignmentTimeToLive().GetSeconds() == 0 {
		tot.ZeroTTL++
	}
	b.action, b.fallback = s, false
	e.stopExpiry(b)
	e.startExpiry(b, time.Duration(qa.GetAssignmentTimeToLive().GetSeconds())*time.Second, false)
}

// setLimiter makes a new limiter for s unless b runs one Envoy takes for
// the same.
func (e *Envoy) setLimiter(b *bucket, tot *Totals, s *typev3.RateLimitStrategy) {
	tb := s.GetTokenBucket()
	if old := b.action.GetTokenBucket(); old != nil && b.limiter != nil &&
		old.GetMaxTokens() == tb.GetMaxTokens() &&
		old.GetTokensPerFill().GetValue() == tb.GetTokensPerFill().GetValue() &&
		old.GetFillInterval().GetNanos() == tb.GetFillInterval().GetNanos() {
		return
	}
	b.limiter = newTokenBucket(tb, time.Now())
	tot.TokenBuckets++
	tot.Capacity += uint64(tb.GetMaxTokens())
}

func (e *Envoy) stopExpiry(b *bucket) {
	if b.expiry != nil {
		b.expiry.Stop()
		b.expiry = nil
	}
	b.gen++
}

// startExpiry arms the timer that ends b's assignment (or, fallback, its
// expired fallback) after d.
func (e *Envoy) startExpiry(b *bucket, d time.Duration, fallback bool) {
	gen := b.gen
	b.expiry = time.AfterFunc(d, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if b.gen != gen || e.closed {
			return
		}
		b.expiry = nil
		if fallback || e.cfg.Expired == nil {
			b.action, b.limiter, b.fallback = nil, nil, false
			if !fallback {
				e.totals[key(b.id)].Expiries++
			}
			return
		}
		e.totals[key(b.id)].Expiries++
		if e.cfg.Expired.GetTokenBucket() != nil {
			e.setLimiter(b, e.totals[key(b.id)], e.cfg.Expired)
		} else {
			b.limiter = nil
		}
		b.action, b.fallback = e.cfg.Expired, true
		b.gen++
		e.startExpiry(b, e.cfg.ExpiredTimeout.Truncate(time.Second), true)
	})
}

// State is what one bucket runs now.
type State struct {
	// Known: the Envoy has the bucket (it is not new or abandoned).
	Known bool
	// Assigned: an assignment from the server is in force; Fallback:
	// the expired-assignment fallback is; neither: the no-assignment
	// behaviour.
	Assigned, Fallback bool
	// Strategy is the assignment or fallback in force (nil: none).
	Strategy *typev3.RateLimitStrategy
	// Rate is the token bucket's rate per second (0 without one).
	Rate float64
}

// State returns what the bucket id runs now.
func (e *Envoy) State(id map[string]string) State {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.buckets[key(id)]
	if b == nil {
		return State{}
	}
	st := State{Known: true, Assigned: b.action != nil && !b.fallback, Fallback: b.fallback, Strategy: b.action}
	if b.limiter != nil {
		st.Rate = b.limiter.rate
	}
	return st
}

// Totals returns what the bucket id did since New.
func (e *Envoy) Totals(id map[string]string) Totals {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.totals[key(id)]; t != nil {
		return *t
	}
	return Totals{}
}

// Streams returns how many streams the Envoy opened.
func (e *Envoy) Streams() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.streams
}

// Close stops the Envoy: its timers, its stream (which the server sees
// end).
func (e *Envoy) Close() {
	e.mu.Lock()
	e.closed = true
	for _, b := range e.buckets {
		e.stopExpiry(b)
	}
	if e.stream != nil {
		_ = e.stream.CloseSend()
	}
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
}

// tokenBucket is Envoy's TokenBucketImpl: it starts full, refills
// continuously, and takes one token per request.
type tokenBucket struct {
	max, tokens, rate float64
	last              time.Time
}

func newTokenBucket(tb *typev3.TokenBucket, now time.Time) *tokenBucket {
	p := float64(1)
	if tb.GetTokensPerFill() != nil {
		p = float64(tb.GetTokensPerFill().GetValue())
	}
	// Envoy divides by the whole seconds of fill_interval.
	rate := p / float64(tb.GetFillInterval().GetSeconds())
	m := float64(tb.GetMaxTokens())
	return &tokenBucket{max: m, tokens: m, rate: rate, last: now}
}

func (t *tokenBucket) consume(now time.Time) bool {
	t.tokens = min(t.max, t.tokens+float64(now.Sub(t.last).Seconds()*t.rate))
	t.last = now
	if t.tokens >= 1 {
		t.tokens--
		return true
	}
	return false
}
