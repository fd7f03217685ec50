package rlqs

import (
	"errors"
	"math"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// bucket is one limit: one bucket id (all the clients that report it, on
// this server), under the entry it matches or the blanket rule.
type bucket struct {
	key      string // canonicalID
	storeKey string
	id       *rlqsv3.BucketId // as the first client sent it, for the actions

	mu   sync.Mutex
	rule *rule // the entry, or the config's unmatched rule
	subs map[*stream]*sub
	// gone are the clients that left (stream ended, bucket abandoned)
	// whose last assignment may still be in force.
	gone []*sub
	// dirty: a demand or the clients changed since the last tick.
	dirty bool
	// reruled: SetConfig gave the bucket its rule since the last tick
	// (the same limit with another burst changes no share, but the
	// assignments).
	reruled bool
	// ticking: a tick runs (it releases mu while it calls the store).
	ticking bool
	removed bool // no longer in the server's map: look it up again
	// lastTick and lastClaim are when the bucket was last ticked and
	// last claimed in the store.
	lastTick, lastClaim time.Time
	// budget is the rate the bucket's clients may be given: the rule's
	// limit alone, the store's last grant with one.
	budget float64
	// claimed: a claim succeeded once (the store knows the bucket).
	claimed bool
	// shared: the last grant counted other servers; contested: one of
	// them was short of its target.
	shared, contested bool
	// level is the water level of the last allocation (+Inf when the
	// clients wanted less than the budget together).
	level float64
}

// assignKind is what a client of a bucket was last sent.
type assignKind uint8

const (
	noAssignment assignKind = iota
	tokenBucketAssignment
	allowAllAssignment
	denyAllAssignment
)

// assignment is what a client runs for a bucket, as last sent.
type assignment struct {
	kind assignKind
	tb   tokenBucket
}

func (a assignment) strategy() *typev3.RateLimitStrategy {
	switch a.kind {
	case tokenBucketAssignment:
		return a.tb.strategy()
	case denyAllAssignment:
		return blanketStrategy(DenyAll)
	}
	return blanketStrategy(AllowAll)
}

// rate is the rate the assignment commits (a blanket rule commits none:
// a bucket whose rule is a blanket rule has no limit to share).
func (a assignment) rate() float64 {
	if a.kind == tokenBucketAssignment {
		return a.tb.rate()
	}
	return 0
}

func blanketAssignment(b Blanket) assignment {
	if b == DenyAll {
		return assignment{kind: denyAllAssignment}
	}
	return assignment{kind: allowAllAssignment}
}

// sub is one client's subscription to a bucket.
type sub struct {
	claimant
	st     *stream
	given  assignment
	sentAt time.Time // when given was last sent, a change or a renewal
	// lastReport and lastUsed are the last report and the last report
	// with requests.
	lastReport, lastUsed time.Time
	// count requests were reported since since, not yet a demand: a
	// demand is measured over at least half a reporting interval.
	count uint64
	since time.Time
	// prevCount requests were reported over the prevTime before since.
	prevCount uint64
	prevTime  time.Duration
}

// expires is the latest the client may run given: the last time it was
// sent, plus the settle time, plus its time to live.
func (s *sub) expires(settle, ttl time.Duration) time.Time {
	return s.sentAt.Add(settle + ttl)
}

// limited reports whether the rule has a limit to share (not a blanket
// rule, and not a limit of 0, which denies all).
func (r *rule) shared() bool { return r.limited && r.requestsPerUnit > 0 }

// wanted is the blanket assignment of a rule without a limit to share.
func (r *rule) wanted() assignment {
	if r.limited { // requests_per_unit 0
		return assignment{kind: denyAllAssignment}
	}
	return blanketAssignment(r.blanket)
}

// demandFloor is the least demand a client counts for: one request per
// reporting interval, so that a subscriber whose last interval was quiet
// keeps a share for its next request.
func (r *rule) demandFloor() float64 { return 1 / r.reportingInterval.Seconds() }

func (b *bucket) action(a assignment, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    a.strategy(),
			},
		},
	}
}

func (b *bucket) abandonAction() *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

// report takes one usage report of st's for the bucket at now: the first
// subscribes st; later ones measure its demand. It returns the action to
// answer with at once (the assignment st runs, again, which renews its
// time to live; or a blanket rule's), or nil, and whether st subscribed.
// ok is false when the bucket was removed meanwhile (look it up again).
func (b *bucket) report(st *stream, allowed, denied uint64, elapsed time.Duration, now time.Time) (act *rlqsv3.RateLimitQuotaResponse_BucketAction, subscribed, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.removed {
		return nil, false, false
	}
	r := b.rule
	n := allowed + denied
	s := b.subs[st]
	if s == nil {
		s = &sub{claimant: claimant{demand: math.Inf(1)}, st: st, since: now, lastReport: now, lastUsed: now}
		if elapsed > 0 {
			// A client that ran the bucket before (with another
			// stream, another server): its report is a measure.
			s.demand = max(float64(n)/elapsed.Seconds(), r.demandFloor())
		}
		b.subs[st] = s
		b.dirty, subscribed = true, true
	} else {
		s.count += n
		s.lastReport = now
		if n > 0 {
			s.lastUsed = now
		}
		if el := now.Sub(s.since); el >= r.reportingInterval/2 {
			// The demand is measured over this interval and the one
			// before, to halve the noise of counting: ten requests a
			// second read as 9 or 11 in one second.
			d := max(float64(s.count+s.prevCount)/(el+s.prevTime).Seconds(), r.demandFloor())
			// A change moves the targets only below the level (above it,
			// the client gets the level whatever it wants), and is
			// worth an allocation only beyond the band of its share:
			// counts are noisy, and a bucket of a thousand clients
			// gets twenty reports an allocation interval.
			if math.IsInf(s.demand, 1) || math.Abs(min(d, b.level)-min(s.demand, b.level)) > allocBand*s.target {
				b.dirty = true
			}
			s.demand, s.prevCount, s.prevTime, s.count, s.since = d, s.count, el, 0, now
		}
	}
	if !r.shared() && s.given != r.wanted() {
		s.given = r.wanted()
	}
	if s.given.kind == noAssignment {
		return nil, subscribed, true
	}
	s.sentAt = now
	return b.action(s.given, r.ttl), subscribed, true
}

// leave ends st's subscription at now: its assignment stays committed
// until it would have expired at the client.
func (b *bucket) leave(st *stream, now time.Time, settle time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.subs[st]
	if s == nil {
		return
	}
	delete(b.subs, st)
	s.leave(now, s.expires(settle, b.rule.ttl))
	if len(s.holds) > 0 {
		b.gone = append(b.gone, s)
	}
	b.dirty = true
}

// tick is the bucket's periodic work at now: abandon the subscriptions
// that are idle or no longer reported, forget the departed ones whose
// assignments have expired, and, for a shared limit, compute the shares
// and send those that changed. It returns whether the bucket is empty
// (nothing subscribed, nothing committed) and whether it should be ticked
// again at the next interval (a client is short of its share while
// commitments settle).
func (b *bucket) tick(s *Server, now time.Time) (empty, again bool) {
	b.mu.Lock()
	settle := s.opts.settle
	r := b.rule
	b.lastTick = now
	for st, c := range b.subs {
		switch {
		case now.Sub(c.lastReport) > r.ttl+settle:
			// The client stopped reporting the bucket: its
			// assignment has expired; tell it to forget the bucket.
			delete(b.subs, st)
			st.forget(b.key, b)
			c.leave(now, now)
			st.enqueue(b.key, b.abandonAction())
			s.stats.abandons.Add(1)
		case now.Sub(c.lastUsed) > r.abandonAfter:
			// No request for a long time: forget it (the client
			// reports it again, as new, on its next request).
			delete(b.subs, st)
			st.forget(b.key, b)
			c.leave(now, now.Add(settle))
			if len(c.holds) > 0 {
				b.gone = append(b.gone, c)
			}
			st.enqueue(b.key, b.abandonAction())
			s.stats.abandons.Add(1)
		}
	}
	b.gone = deleteExpired(b.gone, now)
	if !r.shared() {
		// A blanket rule (or a limit of 0): the same for every client,
		// nothing to share. After a configuration change, send it.
		for _, c := range b.subs {
			if c.given != r.wanted() {
				c.given = r.wanted()
				c.assign(now, settle, 0)
				c.sentAt = now
				c.st.enqueue(b.key, b.action(c.given, r.ttl))
				s.stats.assignments.Add(1)
			}
		}
		// A blanket rule claims nothing: its claim lapses, and a limit
		// loaded later claims anew, not as one Redis lost.
		b.claimed = false
		b.dirty, b.reruled = false, false
		empty = len(b.subs) == 0 && len(b.gone) == 0
		b.mu.Unlock()
		return empty, false
	}

	cs := make([]*claimant, 0, len(b.subs)+len(b.gone))
	for _, c := range b.subs {
		cs = append(cs, &c.claimant)
	}
	for _, c := range b.gone {
		cs = append(cs, &c.claimant)
	}
	refresh := claimRefresh
	if b.shared {
		refresh = sharedClaimRefresh
	}
	if s.store != nil && (b.dirty || b.contested || now.Sub(b.lastClaim) >= refresh || b.settling(now)) {
		cl := &claim{key: b.storeKey, rate: r.rate(), hold: settle + r.ttl + time.Second}
		for _, c := range cs {
			cl.floor += c.committed(now)
			if !c.gone {
				cl.demands = append(cl.demands, c.demand)
			}
		}
		// Known to Redis: claimed there before, or running shares it
		// has not heard of (given while it was away): either way, a
		// claim of ours missing from Redis means it may have lost the
		// others' too.
		cl.known = b.claimed || cl.floor > 0
		cl.release = len(b.subs) == 0
		if cl.release {
			cl.hold = 0
			for _, c := range b.gone {
				cl.hold = max(cl.hold, c.heldUntil().Sub(now))
			}
		}
		b.mu.Unlock()
		g, err := s.claim(cl)
		b.mu.Lock()
		switch {
		case err == nil:
			// The budget covers what the clients run now; the shares
			// aim at the target, lowering first if it is below.
			b.budget, b.claimed, b.lastClaim = min(g.budget, g.target), true, now
			b.shared, b.contested = g.servers > 1, g.contested
		case !b.claimed && errors.Is(err, ErrUnavailable) && s.lastServers.Load() > 0:
			// Never claimed, and Redis is away: an equal part of the
			// limit among the servers last seen on any bucket (none
			// before any claim succeeded: a guess could only be the
			// whole limit, on every replica).
			b.budget = r.rate() / float64(s.lastServers.Load())
		case !b.claimed:
			b.budget = 0 // set up wrong: no share is known
		case !errors.As(err, new(notSent)):
			// Claimed before, and Redis away, or its answer late: it
			// may have stored this claim, lower than the budget if the
			// clients' demands fell. Keep what they run (the floor,
			// which any stored claim covers), raise none.
			b.budget = min(b.budget, cl.floor)
		}
		// A claim not sent (the store away) stored nothing: the bucket
		// keeps the budget it last had.
		now = s.now() // the time of the assignments sent below
	} else if s.store == nil {
		b.budget = r.rate()
	}

	allocate(now, b.budget, cs)
	b.level = math.Inf(1)
	for _, c := range cs {
		if !c.gone && c.target < c.demand {
			b.level = c.target // capped: the level
		}
	}
	short, holds := false, false
	for _, c := range b.subs {
		// A share that changed, a first share, or none for a client
		// that still runs a blanket ALLOW_ALL (a rule that was one
		// until a reload, while no share is known: DENY_ALL).
		if c.next != c.rate || (c.given.kind != tokenBucketAssignment && c.next > 0) || c.given.kind == allowAllAssignment || b.reruled {
			a := assignment{kind: denyAllAssignment}
			if tb, ok := encodeRate(c.next, r.burst, c.given.tb); ok {
				a = assignment{kind: tokenBucketAssignment, tb: tb}
			}
			if a != c.given && (a.kind == tokenBucketAssignment || c.given.kind != noAssignment) {
				c.given = a
				c.assign(now, settle, a.rate())
				c.sentAt = now
				c.st.enqueue(b.key, b.action(a, r.ttl))
				s.stats.assignments.Add(1)
			}
		}
		short = short || c.rate < c.target*(1-allocBand)
	}
	for _, c := range cs {
		holds = holds || now.Before(c.heldUntil())
	}
	b.dirty, b.reruled = false, false
	empty = len(b.subs) == 0 && len(b.gone) == 0
	// Again at the next interval while a client is short and what it
	// waits for may come (a hold settles, another server lowers its
	// claim), and, with a store, while a hold settles (to give it back
	// to the other servers at once) or another server is short.
	again = short && (holds || s.store != nil) || s.store != nil && (holds || b.contested)
	b.mu.Unlock()
	return empty, again
}

// settling reports whether a rate lowered on one of the bucket's clients
// (or a client gone) is still committed at now; b.mu held.
func (b *bucket) settling(now time.Time) bool {
	for _, c := range b.subs {
		if now.Before(c.heldUntil()) {
			return true
		}
	}
	return len(b.gone) > 0
}

// claimRefresh is how often a bucket's claim is renewed in the store while
// nothing changes: well within its hold (settle + TTL + 1 s, at least
// 3 s), so that a live server's claim never lapses. A bucket that other
// servers serve too is claimed every sharedClaimRefresh, so that a change
// in their demand reaches this server's clients within a few hundred
// milliseconds.
const (
	claimRefresh       = time.Second
	sharedClaimRefresh = 250 * time.Millisecond
)

// deleteExpired keeps the departed clients whose assignments may still be
// in force at now.
func deleteExpired(gone []*sub, now time.Time) []*sub {
	out := gone[:0]
	for _, c := range gone {
		if now.Before(c.heldUntil()) {
			out = append(out, c)
		}
	}
	clear(gone[len(out):])
	return out
}

// expireAll sends every client of the bucket its assignment again with a
// time to live of 0, so that Envoy falls back to its expired-assignment
// behaviour at once, and returns the claim that gives the bucket's limit
// back once the settle time has passed (nil for a blanket rule's bucket,
// or without a store).
func (b *bucket) expireAll(s *Server, now time.Time) *claim {
	b.mu.Lock()
	defer b.mu.Unlock()
	settle := s.opts.settle
	r := b.rule
	floor := 0.0
	for st, c := range b.subs {
		if c.given.kind != noAssignment {
			st.enqueue(b.key, b.action(c.given, 0))
			s.stats.expirations.Add(1)
		}
		floor += c.committed(now)
		c.leave(now, now.Add(settle))
	}
	hold := settle
	for _, c := range b.gone {
		floor += c.committed(now)
		hold = max(hold, c.heldUntil().Sub(now))
	}
	clear(b.subs)
	if s.store == nil || !r.shared() || !b.claimed {
		return nil
	}
	return &claim{key: b.storeKey, rate: r.rate(), floor: floor, hold: hold, known: true, release: true}
}

// claim calls the store, bounded by the store timeout, and tells the hook.
// notSent is the error of a claim not sent to the store, away: the last
// claim's that was.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

func (s *Server) claim(c *claim) (grant, error) {
	c.server = s.opts.serverID
	// While the store is away, one claim a claimRefresh goes to it; the
	// others fail at once as the last did (notSent): a sweep of many
	// buckets, each waiting out the store timeout, would hold up the
	// assignments of the buckets that need one now.
	if away := s.away.Load(); away != nil {
		now := s.now().UnixNano()
		last := s.probed.Load()
		if now-last < int64(claimRefresh) || !s.probed.CompareAndSwap(last, now) {
			return grant{}, notSent{*away}
		}
	}
	g, err := s.store.claim(s.opts.storeTimeout, c)
	switch {
	case errors.Is(err, ErrUnavailable):
		s.probed.Store(s.now().UnixNano())
		s.away.Store(&err)
	case err == nil:
		s.away.Store(nil)
	}
	s.stats.storeCalls.Add(1)
	if err != nil {
		s.stats.storeErrors.Add(1)
		if errors.Is(err, ErrMisconfigured) {
			s.stats.storeMisconfigured.Add(1)
		}
	} else if g.servers > 0 {
		s.lastServers.Store(int64(g.servers))
	}
	if s.opts.storeHook != nil {
		s.opts.storeHook(err)
	}
	return g, err
}
