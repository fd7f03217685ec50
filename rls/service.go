package rls

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/internal/sat"
	"github.com/smoothrate/ratelimit/throttle"
)

// Service answers Envoy's ShouldRateLimit from a Config and a Store. It
// implements rlsv3.RateLimitServiceServer: register it on a grpc.Server
// with rlsv3.RegisterRateLimitServiceServer. Safe for concurrent use;
// SetConfig swaps the configuration atomically while calls run.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	state  atomic.Pointer[compiled]
	store  Store
	prefix string // the store's key prefix
	redis  bool   // the store has round trips: bound them, run them at once
	// batch: the additions of all descriptors go to one AllowAll (a
	// MemoryStore, or a Redis that is not a Cluster or a Ring, where keys
	// of several descriptors may live in several slots).
	batch bool
	// timedWindows: the store's windows call returns when its timeout
	// passes, whatever the client does (a RedisStore that batches), so
	// that a call with only windows runs it without a goroutine of its
	// own; nil otherwise.
	timedWindows timedWindows
	cfg          serviceConfig
	metrics      metrics
}

// compiled is a Config with the additions' limiters built over the store.
type compiled struct {
	cfg      *Config
	limiters map[*limitSpec]*throttle.Limiter
}

// New returns a Service answering from cfg with store (nil: a new
// MemoryStore). It returns an error wrapping ErrInvalidOption for a bad
// option or store.
func New(cfg *Config, store Store, opts ...Option) (*Service, error) {
	sc, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if store == nil {
		m, err := NewMemoryStore()
		if err != nil {
			return nil, err
		}
		store = m
	}
	t := store.traits()
	s := &Service{store: store, prefix: t.prefix, redis: t.remote, batch: t.oneSlot, cfg: sc}
	s.metrics.ruleSeries.maxSeries, s.metrics.ruleSeries.maxBytes = int64(sc.maxSeries), int64(sc.maxLabelBytes)
	s.metrics.domainSeries.maxSeries, s.metrics.domainSeries.maxBytes = int64(sc.maxSeries), int64(sc.maxLabelBytes)
	if tw, ok := store.(timedWindows); ok && t.timedWindows {
		s.timedWindows = tw
	}
	if cfg != nil {
		if err := s.SetConfig(cfg); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SetConfig makes cfg the configuration of every call from now on (calls
// already running finish with the old one) and counts a
// config_load_success. Counters in the store are kept: a rule whose limit
// changes keeps its window's count.
func (s *Service) SetConfig(cfg *Config) error {
	if cfg == nil {
		return fmt.Errorf("%w: nil configuration", ErrInvalidOption)
	}
	c := &compiled{cfg: cfg, limiters: map[*limitSpec]*throttle.Limiter{}}
	var err error
	for _, d := range cfg.domains {
		d.walk(func(n *node) {
			if n.rule == nil || n.rule.Unlimited || err != nil {
				return
			}
			for _, l := range n.rule.Limits {
				if l.referenceWindow() {
					continue
				}
				lim, e := throttle.New(s.store.limits(), l.Algorithm, throttle.Limit{Count: int(l.RequestsPerUnit), Period: l.period()})
				if e != nil {
					err = fmt.Errorf("%s: %w", n.rule.FullKey, e)
					return
				}
				c.limiters[l] = lim
			}
		})
	}
	if err != nil {
		return err
	}
	s.state.Store(c)
	s.metrics.configLoadSuccess.Add(1)
	return nil
}

func (n *node) walk(f func(*node)) {
	f(n)
	for _, c := range n.children {
		c.walk(f)
	}
}

// Config returns the configuration in use (nil before the first).
func (s *Service) Config() *Config {
	if c := s.state.Load(); c != nil {
		return c.cfg
	}
	return nil
}

// result is one limit's answer for one descriptor.
type result struct {
	limit     *limitSpec
	over      bool
	before    uint64 // hits counted before this call (the reference's limitBeforeIncrease)
	after     uint64 // and after it
	max       uint64 // the limit's requests per window
	remaining uint32
	reset     int64 // seconds
	cached    bool  // answered by the refusal cache
}

// call is one descriptor's work.
type call struct {
	m         match
	hits      uint64
	unlimited bool
	limits    []*limitSpec // the limits applied (after replaces)
	results   []result
	base      []byte // store key of the descriptor, without window or index
	stats     *ruleStats
}

// ShouldRateLimit decides one request, as envoyproxy/ratelimit does unless
// an addition is configured (see the package documentation). A store that
// fails or exceeds the store timeout gives a gRPC UNAVAILABLE error, one
// set up wrong (ErrMisconfigured) or any other store failure INTERNAL; an
// empty domain, no descriptors or no configuration, the reference's
// errors (code UNKNOWN); a nil ctx, INVALID_ARGUMENT (wrapping
// ErrNilContext).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if ctx == nil {
		s.metrics.serviceErrors.Add(1)
		return nil, errNilContext
	}
	if req.GetDomain() == "" {
		s.metrics.serviceErrors.Add(1)
		return nil, grpcstatus.Error(codes.Unknown, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		s.metrics.serviceErrors.Add(1)
		return nil, grpcstatus.Error(codes.Unknown, "rate limit descriptor list must not be empty")
	}
	if n := len(req.Descriptors); n > s.cfg.maxDescriptors {
		// Refused before any work: a call's work is linear in its
		// descriptors, and this bounds it.
		s.metrics.serviceErrors.Add(1)
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "%d descriptors in one call, more than the %d allowed", n, s.cfg.maxDescriptors)
	}
	st := s.state.Load()
	if st == nil {
		s.metrics.serviceErrors.Add(1)
		return nil, grpcstatus.Error(codes.Unknown, "no rate limit configuration loaded")
	}
	now := s.store.now().Unix()
	calls := make([]call, len(req.Descriptors))
	var replacing map[string]bool
	for i, d := range req.Descriptors {
		m, ok := st.cfg.find(req.Domain, d)
		if !ok {
			s.metrics.notFound(req.Domain)
		}
		c := &calls[i]
		c.m = m
		if m.rule == nil {
			continue
		}
		if m.override && m.rule.Limits[0].seconds() == 0 {
			// The reference crashes here ("should not get here").
			s.metrics.serviceErrors.Add(1)
			return nil, grpcstatus.Errorf(codes.InvalidArgument, "descriptor %d: limit override has unit %v", i, d.GetLimit().GetUnit())
		}
		for _, l := range m.rule.Limits {
			for _, r := range l.Replaces {
				if replacing == nil {
					replacing = map[string]bool{}
				}
				replacing[r] = true
			}
		}
		c.unlimited = m.rule.Unlimited
		if h := d.GetHitsAddend(); h != nil {
			c.hits = h.GetValue() // 0 checks without counting
		} else {
			c.hits = max(1, uint64(req.GetHitsAddend()))
		}
	}
	nLimits, nWindows := 0, 0
	for i := range calls {
		c := &calls[i]
		if c.m.rule == nil || c.unlimited {
			continue
		}
		c.limits = c.m.rule.Limits // shared, never written
		if replacing != nil {
			c.limits = nil
			for _, l := range c.m.rule.Limits {
				if l.Name == "" || !replacing[l.Name] {
					c.limits = append(c.limits, l)
				}
			}
		}
		nLimits += len(c.limits)
		for _, l := range c.limits {
			if l.referenceWindow() {
				nWindows++
			}
		}
	}
	// One allocation each for all descriptors' results and windows.
	results := make([]result, nLimits)
	var ops []windowOp
	if nWindows > 0 {
		ops = make([]windowOp, 0, nWindows)
	}
	additions := false
	for i := range calls {
		c := &calls[i]
		if len(c.limits) == 0 {
			continue
		}
		var buf [128]byte // the key's common start, on the stack when it fits
		base := s.appendBaseKey(buf[:0], req.Domain, req.Descriptors[i].GetEntries(), c.m.shared)
		c.stats = s.metrics.rule(req.Domain, c.m.statsKey, c.m.override || c.m.statsKey != c.m.rule.FullKey)
		addSat(&c.stats.totalHits, c.hits)
		c.results, results = results[:len(c.limits):len(c.limits)], results[len(c.limits):]
		for k, l := range c.limits {
			c.results[k] = result{limit: l, max: uint64(l.RequestsPerUnit)}
			if l.referenceWindow() {
				div := l.seconds()
				start := now / div * div
				ops = append(ops, windowOp{key: windowKey(base, l.index, start), hits: min(c.hits, maxCount), limit: uint64(l.RequestsPerUnit), ttl: start + div - now, keep: start + 2*div - now, end: start + div})
			} else if c.base == nil {
				c.base = bytes.Clone(base)
				additions = true
			}
		}
	}
	var err error
	if additions {
		err = s.decide(ctx, st, calls, ops)
	} else {
		err = s.windowsOnly(ctx, ops)
	}
	if err != nil {
		return nil, s.storeFailed(err)
	}
	// The windows' answers, in the order the ops were made.
	j := 0
	for i := range calls {
		c := &calls[i]
		for k, l := range c.limits {
			if !l.referenceWindow() {
				continue
			}
			op := &ops[j]
			j++
			r := &c.results[k]
			r.after = op.after
			r.before = op.after - min(op.after, c.hits)
			if op.after >= maxCount {
				// Saturated: what the window held is past any limit,
				// and the metrics count every hit over it.
				r.before, r.after = maxCount, sat.AddUint(maxCount, c.hits)
			}
			r.cached = op.cached
			r.over = op.after > r.max
			div := l.seconds()
			r.reset = div - now%div
			if !r.over {
				r.remaining = uint32(r.max - op.after)
			}
		}
	}
	return s.respond(req, calls), nil
}

// appendBaseKey appends to b the reference's cache key without its window:
// prefix, domain, then "key_value_" per entry (a share_threshold entry's
// value replaced by its wildcard, so that all its values share one
// counter). It leaves room for a window's start, which windowKey appends.
// When the entries' part is longer than WithMaxDescriptorBytes, it is
// replaced by hashedPart: "sha256:" and the hex of the first 16 bytes of
// its SHA-256, and "_".
func (s *Service) appendBaseKey(b []byte, domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry, shared []string) []byte {
	n := 0
	for i, e := range entries {
		n += len(e.GetKey()) + len(entryValue(e, i, shared)) + 2
	}
	long := n > s.cfg.maxDescriptorBytes
	if long {
		n = hashedPart
	}
	b = slices.Grow(b, len(s.prefix)+len(domain)+1+n+24)
	b = append(b, s.prefix...)
	b = append(b, domain...)
	b = append(b, '_')
	if long {
		h := sha256.New()
		for i, e := range entries {
			io.WriteString(h, e.GetKey())
			h.Write([]byte{'_'})
			io.WriteString(h, entryValue(e, i, shared))
			h.Write([]byte{'_'})
		}
		var sum [sha256.Size]byte
		b = append(b, "sha256:"...)
		b = hex.AppendEncode(b, h.Sum(sum[:0])[:16])
		return append(b, '_')
	}
	for i, e := range entries {
		b = append(b, e.GetKey()...)
		b = append(b, '_')
		b = append(b, entryValue(e, i, shared)...)
		b = append(b, '_')
	}
	return b
}

// hashedPart is the length of a hashed entries' part: "sha256:", 32 hex
// digits, "_".
const hashedPart = len("sha256:") + 32 + 1

// entryValue is what entry i writes in the store key after its key: its
// value, or its share_threshold wildcard.
func entryValue(e *ratelimitv3.RateLimitDescriptor_Entry, i int, shared []string) string {
	if i < len(shared) && shared[i] != "" {
		return shared[i]
	}
	return e.GetValue()
}

// windowKey is base + the window's start, as the reference names it; a
// second or later limit of a rate_limits list gets "#index_" before the
// start so that its counter is its own.
func windowKey(base []byte, index int, start int64) string {
	b := base[:len(base):cap(base)] // appends in base's spare room, copied by string()
	if index > 0 {
		b = append(b, '#')
		b = strconv.AppendInt(b, int64(index), 10)
		b = append(b, '_')
	}
	return string(strconv.AppendInt(b, start, 10))
}

// windowsOnly runs the store work of a call without additions: its
// windows, if any, bounded by the store timeout when the store has round
// trips or the call is large.
func (s *Service) windowsOnly(ctx context.Context, ops []windowOp) error {
	switch {
	case len(ops) == 0:
		return nil
	case !s.redis:
		ctx, cancel := s.boundLarge(ctx, len(ops))
		defer cancel()
		return s.store.windows(ctx, ops, s.cfg.mode)
	case s.timedWindows != nil:
		return s.timedWindows.windowsWithin(ctx, ops, s.cfg.mode, s.cfg.storeTimeout)
	}
	return s.decide(ctx, nil, nil, ops)
}

// boundLarge bounds a memory store's work on a call of n windows and
// checks by the store timeout: a small call's work is bounded anyway, and
// needs no timer.
func (s *Service) boundLarge(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	if s.cfg.storeTimeout > 0 && n > ctxEvery {
		return s.cfg.storeBound.Within(ctx)
	}
	return ctx, func() {}
}

// maxParallel bounds the jobs a call on a Cluster or a Ring runs at once:
// its descriptors' additions, each a script of its own, go in as many
// jobs at most.
const maxParallel = 16

// decide runs the store work: every reference window in one windows call,
// and the additions' limits through throttle.AllowAll, a descriptor's
// limits all counted or none (see decideAdditions), or, counting only
// admitted calls, the whole call (decideWhole). With a store that has
// round trips the windows and the additions run at once, bounded by the
// store timeout.
func (s *Service) decide(ctx context.Context, st *compiled, calls []call, ops []windowOp) error {
	work, err := additionsWork(st, calls)
	if err != nil {
		return err
	}
	var jobs []func(context.Context) error
	switch {
	case s.cfg.mode == countWhole:
		jobs = append(jobs, func(ctx context.Context) error { return s.decideWhole(ctx, ops, work) })
	default:
		if len(ops) > 0 {
			jobs = append(jobs, func(ctx context.Context) error { return s.store.windows(ctx, ops, countEvery) })
		}
		switch {
		case len(work) == 0:
		case s.batch:
			jobs = append(jobs, func(ctx context.Context) error { return decideAdditions(ctx, work) })
		default:
			// One script per descriptor (their keys may live on
			// several nodes), in at most maxParallel jobs.
			per := (len(work) + maxParallel - 1) / maxParallel
			for part := range slices.Chunk(work, per) {
				jobs = append(jobs, func(ctx context.Context) error {
					for i := range part {
						if err := decideAdditions(ctx, part[i:i+1]); err != nil {
							return err
						}
					}
					return nil
				})
			}
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	if !s.redis {
		ctx, cancel := s.boundLarge(ctx, len(ops)+len(work))
		defer cancel()
		for _, j := range jobs {
			if err := j(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := s.cfg.storeBound.Within(ctx)
	defer cancel()
	// The jobs run apart from the caller, who returns when the context
	// ends whether or not the client honours it (go-redis reads past a
	// deadline unless its ContextTimeoutEnabled is set): an abandoned
	// job's results are never read.
	done := make(chan error, 1)
	go func() {
		if len(jobs) == 1 {
			done <- jobs[0](ctx)
			return
		}
		errs := make([]error, len(jobs))
		var wg sync.WaitGroup
		for i, j := range jobs[1:] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i+1] = j(ctx)
			}()
		}
		errs[0] = jobs[0](ctx)
		wg.Wait()
		done <- errors.Join(errs...)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return classify(ctx, ctx.Err()) // the store timeout is an outage
	}
}

// additionsWork is the additions' checks of every descriptor that has
// some.
func additionsWork(st *compiled, calls []call) ([]addWork, error) {
	var work []addWork
	for i := range calls {
		c := &calls[i]
		w := addWork{c: c}
		for k, l := range c.limits {
			if l.referenceWindow() {
				continue
			}
			lim := st.limiters[l]
			if lim == nil {
				return nil, storeBug("no limiter for %s", c.m.statsKey)
			}
			w.idx = append(w.idx, k)
			w.checks = append(w.checks, throttle.Check{Limiter: lim, Key: additionKey(c.base, l), N: int(min(c.hits, uint64(math.MaxInt32)))})
		}
		if len(w.idx) > 0 {
			work = append(work, w)
		}
	}
	return work, nil
}

// decideWhole decides a call counted whole (WithCountOnlyAdmitted): its
// windows first, all counted or none (one script on Redis, one critical
// section in memory); then, if they were, its additions by one AllowAll,
// all counted or none, and if that refuses, the windows' hits are taken
// back (Store.undo). If the windows refuse, the additions are only asked
// (throttle.CheckAll), so that each descriptor still says whether it
// would pass.
func (s *Service) decideWhole(ctx context.Context, ops []windowOp, work []addWork) error {
	if len(ops) > 0 {
		if err := s.store.windows(ctx, ops, countWhole); err != nil {
			return err
		}
	}
	if len(work) == 0 {
		return nil
	}
	refused := anyOver(ops)
	var checks []throttle.Check
	for _, w := range work {
		checks = append(checks, w.checks...)
	}
	var ds throttle.Decisions
	var err error
	switch {
	case refused:
		ds, err = throttle.CheckAll(ctx, checks...)
	case len(checks) == 1:
		// AllowN, not AllowAll: a RedisStore's refusal cache answers
		// single decisions only.
		var d throttle.Decision
		d, err = checks[0].Limiter.AllowN(ctx, checks[0].Key, checks[0].N)
		ds = throttle.Decisions{d}
	default:
		ds, err = throttle.AllowAll(ctx, checks...)
	}
	if err == nil && !refused && !ds.Allowed() && len(ops) > 0 {
		err = s.store.undo(ctx, ops)
	}
	if err != nil {
		return additionsError(ctx, err)
	}
	off := 0
	for _, w := range work {
		fillAdditions(w, ds[off:off+len(w.checks)])
		off += len(w.checks)
	}
	return nil
}

// addWork is one descriptor's additions: its limits idx and their checks.
type addWork struct {
	c      *call
	idx    []int
	checks []throttle.Check
}

// additionKey is the throttle key of l for the descriptor whose window
// key starts with base. The descriptor's part is a hash tag, so that a
// Redis Cluster keeps its limits in one slot, decided in one script.
func additionKey(base []byte, l *limitSpec) string {
	return "{" + string(base) + "}#" + strconv.Itoa(l.index) + "_" + l.Algorithm.String() + "_" + itoa(l.seconds())
}

// decideAdditions decides several descriptors' additions, each descriptor
// on its own (as the reference decides descriptors) and all its limits
// counted or none, in as few AllowAll calls as it can: one per
// maxBatchKeys checks (one round trip on Redis), so that a call of many
// descriptors neither holds Redis nor a memory store's shards for long,
// and stops between two once ctx has ended. When some descriptors do not
// fit, AllowAll has counted nothing and said which: those are answered
// (refused), and the others are asked again, together.
func decideAdditions(ctx context.Context, work []addWork) error {
	for len(work) > 0 {
		n, checks := 0, 0
		for n < len(work) && (n == 0 || checks+len(work[n].checks) <= maxBatchKeys) {
			checks += len(work[n].checks)
			n++
		}
		if err := decideAdditionsTogether(ctx, work[:n]); err != nil {
			return err
		}
		work = work[n:]
		if len(work) > 0 {
			if err := ctx.Err(); err != nil {
				return cancelled(ctx)
			}
		}
	}
	return nil
}

// decideAdditionsTogether is decideAdditions for descriptors whose checks
// go in one AllowAll.
func decideAdditionsTogether(ctx context.Context, work []addWork) error {
	var buf [8]throttle.Check
	var buf2 [1]throttle.Decision
	for len(work) > 0 {
		checks := buf[:0]
		for _, w := range work {
			checks = append(checks, w.checks...)
		}
		var ds throttle.Decisions
		var err error
		if len(checks) == 1 {
			// AllowN, not AllowAll: a RedisStore's refusal cache
			// answers single decisions only.
			var d throttle.Decision
			d, err = checks[0].Limiter.AllowN(ctx, checks[0].Key, checks[0].N)
			ds = append(buf2[:0], d)
		} else {
			ds, err = throttle.AllowAll(ctx, checks...)
		}
		if err != nil {
			return additionsError(ctx, err)
		}
		if ds.Allowed() {
			off := 0
			for _, w := range work {
				fillAdditions(w, ds[off:off+len(w.checks)])
				off += len(w.checks)
			}
			return nil
		}
		next := work[:0:0]
		off := 0
		for _, w := range work {
			d := ds[off : off+len(w.checks)]
			off += len(w.checks)
			if d.Allowed() {
				next = append(next, w)
			} else {
				fillAdditions(w, d)
			}
		}
		if len(next) == len(work) {
			return storeBug("throttle refused a call without refusing a check")
		}
		work = next
	}
	return nil
}

// additionsError is the error of a failed throttle call, as the windows'
// errors are: ErrMisconfigured for a key of another type, ErrUnavailable
// for any other failure that is not already one or the other.
func additionsError(ctx context.Context, err error) error {
	if errors.Is(err, ErrStore) {
		return classify(ctx, err) // throttle's, named as this package's
	}
	// Not the store's failure (a key too long for throttle, a clock out of
	// range): answered UNAVAILABLE, so that Envoy's failure mode decides.
	return &redisscript.Error{Room: room, Class: redisscript.Outage, Err: err}
}

// storeFailed counts a store failure and gives its answer: UNAVAILABLE
// for an outage (including the store timeout and the caller's own
// deadline), INTERNAL for a store set up wrong (also counted apart) or a
// bug: a distinct code, so that an operator does not wait out what no wait
// fixes. Envoy treats every error alike (its failure_mode_deny decides
// whether the request passes). The status wraps err for errors.Is.
func (s *Service) storeFailed(err error) error {
	s.metrics.storeErrors.Add(1)
	code := codes.Internal
	switch {
	case errors.Is(err, ErrMisconfigured):
		s.metrics.storeMisconfigured.Add(1)
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code = codes.Unavailable
	}
	return &statusError{grpcstatus.New(code, err.Error()), err}
}

// fillAdditions turns a descriptor's decisions into its results.
func fillAdditions(w addWork, ds throttle.Decisions) {
	c := w.c
	for j, k := range w.idx {
		d := ds[j]
		r := &c.results[k]
		r.max = uint64(d.Limit)
		used := uint64(d.Limit - min(d.Limit, d.Remaining))
		if d.Allowed {
			r.after = used
			r.before = used - min(used, c.hits)
			r.remaining = uint32(min(uint64(max(d.Remaining, 0)), math.MaxUint32))
			r.reset = ceilSeconds(int64(d.ResetAfter))
		} else {
			r.over = true
			r.before = used
			r.after = sat.AddUint(used, c.hits)
			wait := d.RetryAfter
			if wait < 0 {
				wait = c.limits[k].period()
			}
			r.reset = max(1, ceilSeconds(int64(wait)))
		}
	}
}

// ceilSeconds rounds ns nanoseconds up to whole seconds.
func ceilSeconds(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (ns + 1e9 - 1) / 1e9
}

// respond turns the results into the response and counts them.
func (s *Service) respond(req *rlsv3.RateLimitRequest, calls []call) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(calls))}
	// Each status with its limit and reset, all in one allocation.
	blocks := make([]statusBlock, len(calls))
	overall := rlsv3.RateLimitResponse_OK
	var minStatus *rlsv3.RateLimitResponse_DescriptorStatus
	minRemaining := uint32(math.MaxUint32)
	for i := range calls {
		c := &calls[i]
		if c.unlimited {
			ds := &blocks[i].status
			ds.Code, ds.LimitRemaining = rlsv3.RateLimitResponse_OK, math.MaxUint32
			resp.Statuses[i] = ds
			continue
		}
		if len(c.results) == 0 {
			ds := &blocks[i].status
			ds.Code = rlsv3.RateLimitResponse_OK
			resp.Statuses[i] = ds
			continue
		}
		r := strictest(c.results)
		stats := c.stats
		s.count(stats, r, c.hits, c.m.rule.ShadowMode)
		code := rlsv3.RateLimitResponse_OK
		if r.over && !c.m.rule.ShadowMode {
			code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		b := &blocks[i]
		b.limit.Name, b.limit.RequestsPerUnit, b.limit.Unit = r.limit.Name, r.limit.RequestsPerUnit, r.limit.Unit
		b.reset.Seconds = r.reset
		ds := &b.status
		ds.Code, ds.CurrentLimit, ds.LimitRemaining, ds.DurationUntilReset = code, &b.limit, r.remaining, &b.reset
		if ds.LimitRemaining < minRemaining {
			minStatus, minRemaining = ds, ds.LimitRemaining
		}
		if code == rlsv3.RateLimitResponse_OVER_LIMIT && c.m.rule.QuotaMode {
			// quota_mode: reported, never enforced (the reference drops
			// the reset from such a status).
			ds = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: ds.CurrentLimit, LimitRemaining: ds.LimitRemaining}
		} else if code == rlsv3.RateLimitResponse_OVER_LIMIT {
			overall = code
			minStatus, minRemaining = ds, 0
		}
		resp.Statuses[i] = ds
	}
	if s.cfg.headers && minStatus != nil {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: s.cfg.limitHeader, Value: strconv.FormatUint(uint64(minStatus.CurrentLimit.RequestsPerUnit), 10)},
			&corev3.HeaderValue{Key: s.cfg.remainingHeader, Value: strconv.FormatUint(uint64(minStatus.LimitRemaining), 10)},
			&corev3.HeaderValue{Key: s.cfg.resetHeader, Value: strconv.FormatInt(minStatus.DurationUntilReset.GetSeconds(), 10)},
		)
	}
	if s.cfg.ietfHeaders {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, ietfHeaders(calls, overall == rlsv3.RateLimitResponse_OVER_LIMIT)...)
	}
	if overall == rlsv3.RateLimitResponse_OVER_LIMIT && s.cfg.globalShadowMode {
		overall = rlsv3.RateLimitResponse_OK
		s.metrics.globalShadowMode.Add(1)
	}
	resp.OverallCode = overall
	return resp
}

// statusBlock holds one descriptor's status and the messages it points to.
type statusBlock struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// strictest is the result a descriptor reports: its first over-limit
// result, else the one with the fewest remaining.
func strictest(rs []result) *result {
	best := &rs[0]
	for i := range rs {
		r := &rs[i]
		switch {
		case r.over && !best.over:
			best = r
		case !r.over && !best.over && r.remaining < best.remaining:
			best = r
		}
	}
	return best
}

// count adds a decided descriptor's hits to its rule's counters, as the
// reference's base limiter does: the hits past the limit are over_limit,
// those between the near-limit threshold and the limit near_limit.
func (s *Service) count(st *ruleStats, r *result, hits uint64, shadow bool) {
	overT := r.max
	nearT := uint64(math.Floor(float64(float32(overT) * s.cfg.nearLimitRatio)))
	switch {
	case r.cached:
		addSat(&st.overLimit, hits)
		addSat(&st.overLimitLocalCache, hits)
	case r.over:
		if r.before >= overT {
			addSat(&st.overLimit, hits)
		} else {
			addSat(&st.overLimit, r.after-overT)
			addSat(&st.nearLimit, overT-max(nearT, r.before))
		}
	default:
		if r.after > nearT {
			if r.before >= nearT {
				addSat(&st.nearLimit, hits)
			} else {
				addSat(&st.nearLimit, r.after-nearT)
			}
		}
		addSat(&st.withinLimit, hits)
	}
	if r.over && shadow {
		if r.cached || r.before >= overT {
			addSat(&st.shadowMode, hits)
		} else {
			addSat(&st.shadowMode, r.after-overT)
		}
	}
}
