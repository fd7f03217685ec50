package rlqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/internal/check"
)

// Server is Envoy's Rate Limit Quota Service: it implements
// rlqsv3.RateLimitQuotaServiceServer (register it on a grpc.Server with
// rlqsv3.RegisterRateLimitQuotaServiceServer). Each Envoy holds one stream,
// reports what it allowed and denied per bucket every reporting interval,
// and runs the token bucket the Server assigns it; the Server splits each
// bucket's limit among the Envoys that report it, max-min fairly by their
// demands, and alone or, with a RedisStore, with every replica on the same
// Redis.
//
// A Server is safe for concurrent use. Make one with New; SetConfig
// changes its configuration while it runs; Shutdown stops it, telling every
// Envoy to drop its assignments first.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer

	cfg   atomic.Pointer[Config]
	store Store
	opts  serverConfig
	now   func() time.Time
	stats counters
	// lastServers is the number of servers the store last reported on
	// any bucket: a bucket never claimed during an outage takes an equal
	// part of its limit among them.
	lastServers atomic.Int64
	// away is the error of the last claim, an outage, while no claim has
	// succeeded since (nil: none); probed is when (unix ns) a claim last
	// went to the store meanwhile (claim).
	away   atomic.Pointer[error]
	probed atomic.Int64

	mu       sync.Mutex
	buckets  map[string]*bucket
	streams  map[*stream]struct{}
	dirty    map[*bucket]struct{}
	stopping bool

	kick     chan struct{}
	quit     chan struct{}
	loopDone chan struct{}
	stopOnce sync.Once
}

// New returns a Server answering from cfg, sharing each bucket's limit
// through store, or alone with a nil store. It starts the goroutine that
// computes shares; Shutdown stops it. A nil configuration or a bad option
// is an error wrapping ErrInvalidOption.
func New(cfg *Config, store Store, opts ...Option) (*Server, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil configuration", ErrInvalidOption)
	}
	if store != nil && check.IsNil(store) {
		return nil, fmt.Errorf("%w: a nil %T", ErrInvalidOption, store)
	}
	s := &Server{
		store:    store,
		opts:     c,
		now:      time.Now,
		buckets:  map[string]*bucket{},
		streams:  map[*stream]struct{}{},
		dirty:    map[*bucket]struct{}{},
		kick:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	s.cfg.Store(cfg)
	s.stats.configLoads.Add(1)
	go s.loop()
	return s, nil
}

// Config returns the configuration in use.
func (s *Server) Config() *Config { return s.cfg.Load() }

// SetConfig makes cfg the configuration from now on. Every bucket is
// matched again: clients whose rule changed get a new assignment at the
// next allocation (a limit lowered is lowered at once; what it frees goes
// to others once settled). Streams of a domain cfg does not have are
// ended with NOT_FOUND.
func (s *Server) SetConfig(cfg *Config) error {
	if cfg == nil {
		return fmt.Errorf("%w: nil configuration", ErrInvalidOption)
	}
	s.cfg.Store(cfg)
	s.stats.configLoads.Add(1)
	s.mu.Lock()
	bs := make([]*bucket, 0, len(s.buckets))
	for _, b := range s.buckets {
		bs = append(bs, b)
	}
	var other []*stream
	for st := range s.streams {
		if st.domain != cfg.domain {
			other = append(other, st)
		}
	}
	s.mu.Unlock()
	for _, st := range other {
		s.stats.unknownDomains.Add(1)
		st.finish(codes.NotFound, unknownDomain(st.domain, cfg))
	}
	for _, b := range bs {
		b.mu.Lock()
		b.rule = cfg.ruleFor(idMap(b.id))
		b.dirty, b.reruled = true, true
		b.mu.Unlock()
		s.markDirty(b)
	}
	s.wakeLoop()
	return nil
}

func unknownDomain(domain string, cfg *Config) string {
	return fmt.Sprintf("rlqs: unknown domain %q (this server serves %q)", domain, cfg.domain)
}

func idMap(id *rlqsv3.BucketId) map[string]string { return id.GetBucket() }

// StreamRateLimitQuotas serves one Envoy's stream: the first message
// names the domain; each bucket's first report subscribes the Envoy to
// it; every report is answered at once with the assignment the Envoy runs
// (which renews its time to live); new and changed shares are pushed as
// they are computed, at most one allocation interval after the report
// that caused them.
func (s *Server) StreamRateLimitQuotas(gs rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	first, err := gs.Recv()
	if err != nil {
		return nil // the client went away before a word
	}
	cfg := s.cfg.Load()
	switch {
	case first.GetDomain() == "":
		s.stats.invalidStreams.Add(1)
		return grpcstatus.Error(codes.InvalidArgument, "rlqs: the first message of a stream must name the domain")
	case first.GetDomain() != cfg.domain:
		s.stats.unknownDomains.Add(1)
		return grpcstatus.Error(codes.NotFound, unknownDomain(first.GetDomain(), cfg))
	}
	st := newStream(first.GetDomain())
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return grpcstatus.Error(codes.Unavailable, ErrShutdown.Error())
	}
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	defer s.endStream(st)

	go st.sendLoop(gs.Send)
	msgs := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	go func() {
		defer close(msgs)
		for {
			m, err := gs.Recv()
			if err != nil {
				return
			}
			select {
			case msgs <- m:
			case <-st.done:
				return
			}
		}
	}()
	s.handle(st, first)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				st.finish(codes.OK, "")
				<-st.sent
				return st.err()
			}
			s.handle(st, m)
		case <-st.done:
			<-st.sent
			return st.err()
		}
	}
}

// handle takes one message of reports.
func (s *Server) handle(st *stream, m *rlqsv3.RateLimitQuotaUsageReports) {
	s.stats.reportMessages.Add(1)
	now := s.now()
	for _, u := range m.GetBucketQuotaUsages() {
		s.stats.reports.Add(1)
		id := u.GetBucketId().GetBucket()
		if !validID(id) {
			s.stats.invalidReports.Add(1)
			continue
		}
		key := canonicalID(id)
		st.mu.Lock()
		_, known := st.buckets[key]
		full := !known && len(st.buckets) >= s.opts.maxPerStream
		st.mu.Unlock()
		if full {
			s.stats.invalidReports.Add(1)
			continue
		}
		for {
			b := s.bucketFor(key, u.GetBucketId())
			if b == nil {
				return // shutting down
			}
			act, subscribed, ok := b.report(st, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), u.GetTimeElapsed().AsDuration(), now)
			if !ok {
				continue // removed meanwhile
			}
			if subscribed {
				st.mu.Lock()
				st.buckets[key] = b
				st.mu.Unlock()
			}
			if act != nil {
				st.enqueue(key, act)
				s.stats.renewals.Add(1)
			}
			b.mu.Lock()
			dirty := b.dirty
			b.mu.Unlock()
			if dirty {
				s.markDirty(b)
			}
			break
		}
	}
}

// validID reports whether a client's bucket id can be served: not empty,
// within MaxBucketIDKeys and MaxBucketIDBytes.
func validID(id map[string]string) bool {
	if len(id) == 0 || len(id) > MaxBucketIDKeys {
		return false
	}
	n := 0
	for k, v := range id {
		n += len(k) + len(v)
	}
	return n <= MaxBucketIDBytes
}

// bucketFor returns the bucket of key, made if new; nil once the server
// is stopping.
func (s *Server) bucketFor(key string, id *rlqsv3.BucketId) *bucket {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil
	}
	if b := s.buckets[key]; b != nil {
		return b
	}
	cfg := s.cfg.Load()
	h := sha256.Sum256([]byte(cfg.domain + "\x00" + key))
	b := &bucket{
		key:      key,
		storeKey: "ratelimit:rlqs:{" + hex.EncodeToString(h[:16]) + "}",
		id:       id,
		rule:     cfg.ruleFor(id.GetBucket()),
		subs:     map[*stream]*sub{},
		level:    math.Inf(1),
	}
	s.buckets[key] = b
	return b
}

// endStream leaves every bucket st reported: each keeps the assignment
// st ran committed until it would have expired.
func (s *Server) endStream(st *stream) {
	st.finish(codes.OK, "")
	now := s.now()
	st.mu.Lock()
	bs := make([]*bucket, 0, len(st.buckets))
	for _, b := range st.buckets {
		bs = append(bs, b)
	}
	clear(st.buckets)
	st.mu.Unlock()
	for _, b := range bs {
		b.leave(st, now, s.opts.settle)
		s.markDirty(b)
	}
	s.mu.Lock()
	delete(s.streams, st)
	s.mu.Unlock()
}

func (s *Server) markDirty(b *bucket) {
	s.mu.Lock()
	s.dirty[b] = struct{}{}
	s.mu.Unlock()
}

func (s *Server) wakeLoop() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// loop runs the buckets' ticks: the dirty ones at every allocation
// interval, every bucket once per sharedClaimRefresh.
func (s *Server) loop() {
	defer close(s.loopDone)
	t := time.NewTicker(s.opts.interval)
	defer t.Stop()
	var lastSweep time.Time
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		case <-s.kick:
		}
		now := s.now()
		s.mu.Lock()
		var due []*bucket
		if now.Sub(lastSweep) >= sharedClaimRefresh {
			lastSweep = now
			for _, b := range s.buckets {
				due = append(due, b)
			}
		} else {
			for b := range s.dirty {
				due = append(due, b)
			}
		}
		clear(s.dirty)
		s.mu.Unlock()
		s.tickAll(due, now)
	}
}

// storeConcurrency bounds the buckets ticked at once with a store: each
// tick may wait for a round trip. Without one, as many as there are
// processors.
const storeConcurrency = 16

func (s *Server) tickAll(due []*bucket, now time.Time) {
	one := func(b *bucket) {
		empty, again := b.tick(s, now)
		switch {
		case empty:
			s.remove(b)
		case again:
			s.markDirty(b)
		}
	}
	if len(due) < 2 {
		for _, b := range due {
			one(b)
		}
		return
	}
	workers := runtime.GOMAXPROCS(0)
	if s.store != nil {
		workers = storeConcurrency
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, workers)
	for _, b := range due {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			one(b)
			<-sem
		}()
	}
	wg.Wait()
}

// remove forgets b if it is still empty.
func (s *Server) remove(b *bucket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) > 0 || len(b.gone) > 0 || b.removed {
		return
	}
	b.removed = true
	if s.buckets[b.key] == b {
		delete(s.buckets, b.key)
	}
	delete(s.dirty, b)
}

// Shutdown stops the server gracefully. It refuses new streams, sends every
// open stream each of its assignments again with a time to live of 0 (so
// that each Envoy falls back at once to its expired-assignment behaviour
// rather than keep a share nobody renews), ends the streams with
// UNAVAILABLE once those are sent, stops computing shares and, with a
// store, gives each bucket's limit back to the other replicas once the
// settle time has passed (releaseWorkers buckets at once, each call bounded
// by the store timeout). ctx bounds the wait for slow clients and for the
// store; the streams are ended, and the releases sent, anyway. A restarted
// server builds its shares again from the Envoys' next reports. Calling it
// again does nothing.
func (s *Server) Shutdown(ctx context.Context) error {
	if ctx == nil {
		return check.ErrNilContext
	}
	var err error
	s.stopOnce.Do(func() { err = s.shutdown(ctx) })
	return err
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	streams := make([]*stream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	bs := make([]*bucket, 0, len(s.buckets))
	for _, b := range s.buckets {
		bs = append(bs, b)
	}
	s.mu.Unlock()
	close(s.quit)
	<-s.loopDone

	now := s.now()
	var releases []*claim
	for _, b := range bs {
		if c := b.expireAll(s, now); c != nil {
			releases = append(releases, c)
		}
	}
	for _, st := range streams {
		st.close()
	}
	var err error
	for _, st := range streams {
		select {
		case <-st.sent:
		case <-st.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		st.finish(codes.Unavailable, ErrShutdown.Error())
	}
	if e := s.releaseAll(ctx, releases); err == nil {
		err = e
	}
	return err
}

// releaseWorkers is how many buckets Shutdown gives back at once: on a
// slow store, one after the other, a thousand buckets would take a
// thousand store timeouts.
const releaseWorkers = 16

// releaseAll sends the release claims cs, releaseWorkers at a time, and
// waits for them until ctx ends; those still running then finish (each
// within the store timeout) after it returns.
func (s *Server) releaseAll(ctx context.Context, cs []*claim) error {
	sem := make(chan struct{}, releaseWorkers)
	done := make(chan error, len(cs))
	for _, c := range cs {
		go func() {
			sem <- struct{}{}
			_, e := s.claim(c)
			<-sem
			done <- e
		}()
	}
	var err error
	for range cs {
		select {
		case e := <-done:
			if e != nil && err == nil {
				err = fmt.Errorf("rlqs: giving a bucket's limit back: %w", e)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}
