package proxy

// nginx's limit_req for the proxy: --queue holds excess requests instead of
// refusing them, --status picks the refusal's code, --dry-run watches
// without acting, and --limit may be given several times.
//
// nginx keeps, per key, an excess (in thousandths of a request) that leaks
// at the rate and grows by one per admitted request; a request is refused
// when its excess would pass burst, and delayed by (excess − delay)/rate
// when it passes delay (../docs/http.md has the mapping of the directives).
// That excess is GCRA's debt after the request less one request: nginx's
// burst=B is a GCRA bucket of B + 1 requests, and its delay=D a bucket of
// D + 1 served at once. So a limit here is one GCRA limit of burst K + Q
// (K = --burst, served at once; Q = --queue, held), decided by the store
// like any other (memory or Redis, several limits atomically through
// throttle.AllowAll), and a request it admits is held for the time its debt
// takes to fall back to K requests: the Decision's ResetAfter (the debt
// after the request, in whole µs rounded up) less K emission intervals,
// rounded down to whole milliseconds as nginx's timers are. With time in
// whole milliseconds (millisecondClock) and a rate of N per second, that is
// nginx's arithmetic exactly: nginx's own rate is N/1000 per millisecond,
// and the rounding up of ResetAfter never crosses a millisecond (the exact
// hold is a multiple of 1/N ms, so at least 1 µs from the next whole
// millisecond while N ≤ 1000).

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/smoothrate/ratelimit/httplimit"
	"github.com/smoothrate/ratelimit/throttle"
)

// queuedLimit is one --limit with its --burst and --queue.
type queuedLimit struct {
	text   string         // as given, e.g. "10/s": its policy name when there are several
	limit  throttle.Limit // Burst = atOnce + queue: what the store admits
	atOnce int            // K: served at once
	queue  int            // Q: held, then sent on when the rate allows
}

// queueConfig is what --queue, --status, --dry-run and several --limit add
// to the proxy.
type queueConfig struct {
	limits []queuedLimit
	status int  // the refusal's status code
	dryRun bool // decide, count and set headers; refuse and hold nothing
}

// queueFlags are the raw values of the flags queueConfig is made of.
type queueFlags struct {
	limits, bursts, queues stringsFlag
	status                 int
	dryRun                 bool
}

func (f *queueFlags) define(fs *flag.FlagSet) {
	fs.Var(&f.limits, "limit", "requests per client: `COUNT/PERIOD`, e.g. 100/min, 10/s, 20/15s (repeatable: every limit applies)")
	fs.Var(&f.bursts, "burst", "most requests served at once (gcra, token-bucket, leaky-bucket; default COUNT); once for every --limit, or once per --limit in their order")
	fs.Var(&f.queues, "queue", "hold up to this many more requests and send each on when the rate allows, instead of refusing them (nginx's limit_req burst); once, or once per --limit")
	fs.IntVar(&f.status, "status", http.StatusTooManyRequests, "the refusal's status `code` (400-599; nginx's limit_req_status, default 503 there)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "decide, count and set the headers, but refuse and hold nothing (nginx's limit_req_dry_run)")
}

// parseQueueFlags checks the flags for alg. It returns nil when they ask
// for nothing beyond one plain limit: the proxy then works as it always did.
func parseQueueFlags(f *queueFlags, alg throttle.Algorithm) (*queueConfig, error) {
	if len(f.limits) == 0 {
		return nil, errors.New("--limit is required (e.g. --limit 100/min)")
	}
	n := len(f.limits)
	perLimit := func(name string, vals []string) (func(i int) string, error) {
		switch len(vals) {
		case 0:
			return func(int) string { return "" }, nil
		case 1:
			return func(int) string { return vals[0] }, nil
		case n:
			return func(i int) string { return vals[i] }, nil
		}
		return nil, fmt.Errorf("--%s given %d times for %d --limit: give it once (for every limit) or once per --limit", name, len(vals), n)
	}
	burstOf, err := perLimit("burst", f.bursts)
	if err != nil {
		return nil, err
	}
	queueOf, err := perLimit("queue", f.queues)
	if err != nil {
		return nil, err
	}
	q := &queueConfig{status: f.status, dryRun: f.dryRun}
	if q.status < 400 || q.status > 599 {
		return nil, fmt.Errorf("--status %d: want a code from 400 to 599", q.status)
	}
	seen := map[string]bool{}
	queued := false
	for i, s := range f.limits {
		l, err := parseLimit(s)
		if err != nil {
			return nil, fmt.Errorf("--limit %q: %v", s, err)
		}
		ql := queuedLimit{text: s, limit: l, atOnce: l.Count}
		if b := burstOf(i); b != "" {
			if ql.atOnce, err = strconv.Atoi(b); err != nil || ql.atOnce < 1 {
				return nil, fmt.Errorf("--burst %q: want a whole number of requests, at least 1", b)
			}
		}
		if v := queueOf(i); v != "" {
			if ql.queue, err = strconv.Atoi(v); err != nil || ql.queue < 0 {
				return nil, fmt.Errorf("--queue %q: want a whole number of requests, 0 or more", v)
			}
		}
		if ql.queue > 0 {
			queued = true
			if alg != throttle.GCRA && alg != throttle.TokenBucket && alg != throttle.LeakyBucket {
				return nil, fmt.Errorf("--queue needs a bucket to hold requests against: --algorithm gcra, token-bucket or leaky-bucket, not %v", alg)
			}
		}
		if ql.atOnce > int(^uint(0)>>2)-ql.queue {
			return nil, fmt.Errorf("--burst %d with --queue %d: too large", ql.atOnce, ql.queue)
		}
		ql.limit.Burst = ql.atOnce + ql.queue
		if err := ql.limit.Validate(alg); err != nil {
			return nil, fmt.Errorf("--limit %s with --algorithm %v: %v", s, alg, err)
		}
		if seen[s] {
			return nil, fmt.Errorf("--limit %s given twice", s)
		}
		seen[s] = true
		q.limits = append(q.limits, ql)
	}
	if !queued && !q.dryRun && q.status == http.StatusTooManyRequests && n == 1 {
		return nil, nil
	}
	return q, nil
}

// describe is the limits as the start-up line shows them.
func (q *queueConfig) describe() string {
	var b strings.Builder
	for i, l := range q.limits {
		if i > 0 {
			b.WriteString(" and ")
		}
		fmt.Fprintf(&b, "%d/%v (%d at once", l.limit.Count, l.limit.Period, l.atOnce)
		if l.queue > 0 {
			fmt.Fprintf(&b, ", %d queued", l.queue)
		}
		b.WriteString(")")
	}
	if q.dryRun {
		b.WriteString(", dry run")
	}
	return b.String()
}

// limiters builds a limiter per limit over store, and the middleware's
// options that add the others and hand every decision to h.
func (q *queueConfig) limiters(store throttle.Store, alg throttle.Algorithm, key httplimit.KeyPart, h *queueHandler) (*throttle.Limiter, []httplimit.Option, error) {
	var first *throttle.Limiter
	var opts []httplimit.Option
	for i, l := range q.limits {
		lim, err := throttle.New(store, alg, l.limit)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case i == 0:
			first = lim
			if len(q.limits) > 1 {
				opts = append(opts, httplimit.WithName(l.text), httplimit.WithKey(key))
			} else {
				opts = append(opts, httplimit.WithKey(key))
			}
		default:
			opts = append(opts, httplimit.WithLimit(l.text, lim, key))
		}
	}
	opts = append(opts, httplimit.WithDecisionHandler(h.decided))
	return first, opts, nil
}

// holdFor returns how long nginx's limit_req would hold a request that the
// store admitted with decisions ds, one per limit: for each limit, the time
// its debt after the request (ResetAfter, whole µs rounded up) takes to fall
// to atOnce requests, rounded down to whole milliseconds; the longest over
// the limits, as with several limit_req directives. 0: serve at once. A
// limit without a queue holds nothing: a bucket admits only what it serves
// at once, and a window's ResetAfter is not a debt.
func holdFor(limits []queuedLimit, ds []throttle.Decision) time.Duration {
	var longest time.Duration
	for i, d := range ds {
		if i >= len(limits) || limits[i].queue == 0 || !d.Allowed || d.ResetAfter <= 0 {
			continue
		}
		longest = max(longest, holdOne(limits[i], d.ResetAfter))
	}
	return longest
}

// holdOne is (debt − atOnce·Period/Count), floored to the millisecond, for
// one limit, computed in 128 bits: debt·Count can pass 2^63 ns.
func holdOne(l queuedLimit, debt time.Duration) time.Duration {
	count := uint64(l.limit.Count)
	hi, lo := bits.Mul64(uint64(debt), count)
	khi, klo := bits.Mul64(uint64(l.atOnce), uint64(l.limit.Period))
	if hi < khi || (hi == khi && lo <= klo) {
		return 0
	}
	lo, borrow := bits.Sub64(lo, klo, 0)
	hi, _ = bits.Sub64(hi, khi, borrow)
	ns, _ := bits.Div64(hi, lo, count) // hi < count: the quotient is below debt
	return time.Duration(ns).Truncate(time.Millisecond)
}

// queueHandler answers every decided request when queueConfig asks for more
// than the middleware does alone (see httplimit.DecisionHandler).
type queueHandler struct {
	cfg     *queueConfig
	m       *proxyMetrics
	refused func(*http.Request, throttle.Decision) // counts a refusal, before the answer
	freed   freedPlaces
}

func newQueueHandler(cfg *queueConfig, m *proxyMetrics, refused func(*http.Request, throttle.Decision)) *queueHandler {
	return &queueHandler{cfg: cfg, m: m, refused: refused, freed: freedPlaces{byKey: map[string][]time.Time{}}}
}

// decided holds, passes or refuses a request whose limits were decided.
func (h *queueHandler) decided(w http.ResponseWriter, r *http.Request, next http.Handler, keys []string, ds []throttle.Decision) {
	allowed := throttle.Decisions(ds).Allowed()
	var hold time.Duration
	if allowed {
		hold = holdFor(h.cfg.limits, ds)
	}
	if h.cfg.dryRun {
		switch {
		case !allowed:
			h.m.dryRefused.Add(1)
			w.Header().Del("Retry-After") // it passes
		case hold > 0:
			h.m.dryHeld.Add(1)
		}
		next.ServeHTTP(w, r)
		return
	}
	if allowed && hold == 0 {
		next.ServeHTTP(w, r)
		return
	}
	now := time.Now()
	key := placeKey(keys)
	var at time.Time
	if allowed {
		at = now.Add(hold)
		// A place freed earlier by a client that went away is ours
		// instead; ours is then free for the next.
		if s, ok := h.freed.take(key, now, at); ok {
			h.freed.put(key, at, now)
			at = s
		}
	} else if s, ok := h.freed.take(key, now, time.Time{}); ok {
		at = s
		w.Header().Del("Retry-After")
	} else {
		h.refused(r, throttle.Decisions(ds).Strictest())
		h.refuse(w, ds)
		return
	}
	if wait := at.Sub(now); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			h.m.heldForwarded.Add(1) // counted once forwarded: a counter never goes down
		case <-r.Context().Done():
			// The client went away: its place goes to the next
			// request of the same key, so that it is not lost.
			t.Stop()
			h.freed.put(key, at, time.Now())
			h.m.heldGone.Add(1)
			return
		}
	}
	next.ServeHTTP(w, r)
}

// refuse answers with the configured status and a problem body naming the
// limits that refused (as RateLimit-Policy names them), as httplimit's
// does; the RateLimit headers and Retry-After are already set.
func (h *queueHandler) refuse(w http.ResponseWriter, ds []throttle.Decision) {
	var violated []string
	for i, d := range ds {
		if !d.Allowed && i < len(h.cfg.limits) {
			name := h.cfg.limits[i].text
			if len(h.cfg.limits) == 1 {
				name = httplimit.DefaultName
			}
			violated = append(violated, name)
		}
	}
	policies, _ := json.Marshal(violated)
	hd := w.Header()
	hd.Set("Content-Type", "application/problem+json")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(h.cfg.status)
	if h.cfg.status == http.StatusTooManyRequests {
		fmt.Fprintf(w, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"retry after %s seconds","violated-policies":%s}`+"\n", hd.Get("Retry-After"), policies)
		return
	}
	fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d,"detail":"rate limited: retry after %s seconds","violated-policies":%s}`+"\n", http.StatusText(h.cfg.status), h.cfg.status, hd.Get("Retry-After"), policies)
}

// placeKey joins a request's keys unambiguously (a key may hold any byte).
func placeKey(keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// maxFreedPlaces bounds the places remembered; past it a freed place is
// lost, as it is in nginx (a held request stays counted).
const maxFreedPlaces = 1 << 16

// freedPlaces are, per key, the send times of held requests whose client
// went away. Each was counted by the store when admitted; the next request
// of the key takes the earliest one still ahead and is sent then, instead
// of waiting longer or being refused, without being counted again. So a
// departed client's place in the queue is not lost, and no more requests
// are sent, nor earlier, than the store counted. A place whose time has
// passed is forgotten: sending late could crowd the next interval.
type freedPlaces struct {
	mu    sync.Mutex
	byKey map[string][]time.Time // sorted
	n     int
}

// take removes and returns the earliest place of key at or after now and
// before before (the zero time: any).
func (f *freedPlaces) take(key string, now, before time.Time) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ps := f.byKey[key]
	i := 0
	for i < len(ps) && ps[i].Before(now) {
		i++
	}
	ok := i < len(ps) && (before.IsZero() || ps[i].Before(before))
	var s time.Time
	if ok {
		s = ps[i]
		i++
	}
	f.n -= i
	if ps = ps[i:]; len(ps) == 0 {
		delete(f.byKey, key)
	} else {
		f.byKey[key] = ps
	}
	return s, ok
}

// put remembers a freed place at for key.
func (f *freedPlaces) put(key string, at, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n >= maxFreedPlaces {
		f.sweep(now)
		if f.n >= maxFreedPlaces {
			return
		}
	}
	ps := f.byKey[key]
	i := len(ps)
	for i > 0 && ps[i-1].After(at) {
		i--
	}
	f.byKey[key] = append(ps[:i:i], append([]time.Time{at}, ps[i:]...)...)
	f.n++
}

// sweep forgets the places that have passed.
func (f *freedPlaces) sweep(now time.Time) {
	for k, ps := range f.byKey {
		i := 0
		for i < len(ps) && ps[i].Before(now) {
			i++
		}
		f.n -= i
		if i == len(ps) {
			delete(f.byKey, k)
		} else {
			f.byKey[k] = ps[i:]
		}
	}
}

// millisecondClock is the proxy's clock for its memory store: nginx decides
// on whole milliseconds, and so, to decide as nginx does, do we.
type millisecondClock struct{}

func (millisecondClock) Now() time.Time { return time.Now().Truncate(time.Millisecond) }

// limiters returns the limit step's first limiter over store and the
// options that key it and add the rest: one plain limit, or queueConfig's,
// whose refusals go to refused (the proxy's refusal hook).
func (lc *limitConfig) limiters(store throttle.Store, m *proxyMetrics, refused func(*http.Request, throttle.Decision)) (*throttle.Limiter, []httplimit.Option, error) {
	if lc.queue == nil {
		lim, err := throttle.New(store, lc.alg, lc.limit)
		return lim, []httplimit.Option{httplimit.WithKey(lc.keyPart)}, err
	}
	return lc.queue.limiters(store, lc.alg, lc.keyPart, newQueueHandler(lc.queue, m, refused))
}
