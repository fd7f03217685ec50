package throttle

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// RedisStore keeps keyed-limiter state in Redis, shared by every process
// that uses the same server or Cluster. Each decision is one Lua script run
// atomically on the server, in one round trip (EVALSHA, EVAL when the
// server does not have the script yet). The scripts are ports of the same
// functions the MemoryStore runs, with the same integer arithmetic, so both
// stores return identical Decisions for identical calls and times.
//
// # Keys
//
// The state of (algorithm, key) lives in the Redis key
// prefix + tag + ":" + key, with prefix DefaultKeyPrefix ("throttle:") or
// WithKeyPrefix's, and tag one of gcra, tb, lb, fw, sw, sl. GCRA, the
// buckets and the windows keep their three integers as a 24-byte string,
// three little-endian IEEE doubles (one GET, one SET with a TTL: a hash
// would cost a PEXPIRE more per decision; binary because the script
// unpacks it in one call instead of converting three decimals); the
// sliding log keeps a sorted set with one member per
// admitted unit, "<µs>:<i>", scored by its time in µs. Every key a script
// touches is passed in KEYS, so Redis Cluster and proxies route it. Every
// write sets a TTL, never below one second: until the key is back to its
// full allowance (GCRA, buckets), until its windows no longer count
// (windows), until its newest entry expires (log). A key that holds
// something else (another type, or a string that is not a state) is an
// error wrapping ErrWrongType and ErrStore; nothing is overwritten.
//
// The store adds no hash tag. In a Cluster, give keys that AllowAll checks
// together a common tag: "{1.2.3.4}:ip" and "{1.2.3.4}:route:/x" hash by
// "1.2.3.4" and are decided in one script.
//
// # Time
//
// Without WithStoreClock the scripts read Redis TIME, so every process agrees
// whatever its own clock. Writing after TIME needs script effects
// replication, the default since Redis 5: the store needs Redis 5 or later
// (tested with 7.0). With WithStoreClock the store passes its clock's time
// into the scripts (for tests; every process must then agree on the time).
//
// # Failures
//
// A call that fails (server down, timeout, cancelled context) returns an
// error wrapping ErrStore and the zero Decision, which refuses; the caller
// chooses to fail open or closed. Nothing is retried except EVALSHA's
// fallback to EVAL, which is safe because a script writes nothing before
// the last point at which it can fail. State lives in Redis only: a server
// restarted without persistence has forgotten every key (they are back to
// their full allowance).
//
// # AllowAll in a Cluster
//
// When all checks' keys hash to one slot (always on a single server), AllowAll
// is one script in one round trip, all-or-nothing. When they hash to
// several slots (in a Cluster, or several shards of a Ring), no script can
// see them all: the store first asks each slot's node whether its checks
// allow, without counting (one call per slot, in slot order); if any
// refuses, nothing is counted and the answers are returned. Otherwise it
// counts each slot's checks in turn, each group all-or-nothing. If another
// process took the room between the two rounds, a group can refuse after
// earlier groups were counted: those stay counted. The result is then
// refused: over-counting, never over-admitting. This costs two round trips
// per slot; a common hash tag avoids it.
//
// # Refusal cache
//
// WithRefusalCache keeps recent refusals in this process so that a key
// that floods is refused without a round trip until its RetryAfter has
// passed; see WithRefusalCache.
type RedisStore struct {
	client redis.UniversalClient
	cfg    storeConfig
	// inline: the client bounds a call by its context's deadline
	// (ContextTimeoutEnabled), so calls need no goroutine of their own.
	inline bool
	// gate dials the server before a call while it is not known to be
	// reachable, so that a client pointed nowhere fails here instead of
	// logging go-redis's dial errors (redisscript.Gate).
	gate   *redisscript.Gate
	keyPre [SlidingLog + 1]string // prefix + tag + ":" for each algorithm
	cache  *refusalCache          // nil: off
	group  func(key string) string
	start  time.Time // the cache's time base without WithStoreClock (monotonic)
	// ttlFloor is the shortest TTL a script sets, in ms: 1000, or longer
	// for tests (withTTLFloor).
	ttlFloor int64
}

// algTags are the algorithms' parts of a Redis key.
var algTags = [...]string{
	GCRA:          "gcra",
	TokenBucket:   "tb",
	LeakyBucket:   "lb",
	FixedWindow:   "fw",
	SlidingWindow: "sw",
	SlidingLog:    "sl",
}

// NewRedisStore returns a store that keeps state in Redis through client
// (a *redis.Client, *redis.ClusterClient, *redis.Ring or a failover
// client). Options: WithKeyPrefix, WithStoreClock and WithRefusalCache;
// WithMaxKeys and WithMaxBytes do not apply (Redis bounds memory with TTLs and its own
// maxmemory). A nil client, a nil option, a bad value or an option that
// does not apply is an error wrapping ErrInvalidOption.
func NewRedisStore(client redis.UniversalClient, opts ...StoreOption) (*RedisStore, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	}
	cfg, err := buildStoreConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.setMaxKeys {
		return nil, fmt.Errorf("%w: WithMaxKeys applies to a MemoryStore, not a RedisStore", ErrInvalidOption)
	}
	if cfg.setMaxBytes {
		return nil, fmt.Errorf("%w: WithMaxBytes applies to a MemoryStore, not a RedisStore", ErrInvalidOption)
	}
	s := &RedisStore{client: client, cfg: cfg, inline: redisscript.HonoursDeadlines(client), gate: redisscript.NewGate(client, cfg.callTimeout), start: time.Now(), ttlFloor: 1000}
	for a := GCRA; a <= SlidingLog; a++ {
		s.keyPre[a] = cfg.prefix + algTags[a] + ":"
	}
	if cfg.refusalCache > 0 {
		s.cache = newRefusalCache(cfg.refusalCache)
	}
	switch client.(type) {
	case *redis.ClusterClient:
		s.group = func(key string) string { return fmt.Sprint(keySlot(key)) }
	case *redis.Ring:
		s.group = hashTag
	}
	return s, nil
}

// DefaultCallTimeout bounds each call a RedisStore makes to Redis when
// WithCallTimeout is not given: a round trip on a healthy network takes
// well under a millisecond, so a call this late is an outage, and a request
// path should not wait on go-redis's own defaults (a 5 s dial, a 3 s read).
const DefaultCallTimeout = 50 * time.Millisecond

// defaultCallTimeout is DefaultCallTimeout, except in this package's tests,
// whose round trips on a loaded machine may take longer (TestMain).
var defaultCallTimeout = DefaultCallTimeout

// WithCallTimeout bounds each call a RedisStore makes to Redis (one script
// run, or a DEL for Reset; AllowAll across Cluster slots makes several) to
// d, DefaultCallTimeout without it. A call that takes longer returns an
// error wrapping ErrUnavailable and ErrStore (the script may or may not
// have run); the caller's context can end a call sooner. The bound holds
// whatever the client's own timeouts: the call runs in a goroutine of its
// own, which the client's timeouts end later. d must be positive; it does
// not apply to a MemoryStore (ErrInvalidOption).
func WithCallTimeout(d time.Duration) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: call timeout %v must be positive", ErrInvalidOption, d)
		}
		cfg.callTimeout, cfg.setTimeout = d, true
		return nil
	})
}

func (s *RedisStore) err() error {
	if s == nil {
		return ErrNilStore
	}
	return nil
}

// redisKey is the Redis key of (alg, key).
func (s *RedisStore) redisKey(alg Algorithm, key string) string {
	return s.keyPre[alg] + key
}

// scriptNow is the time argument of the scripts: the clock's µs with
// WithStoreClock, else -1 (the script reads Redis TIME).
func (s *RedisStore) scriptNow() (int64, error) {
	if s.cfg.clock == nil {
		return -1, nil
	}
	return micros(s.cfg.clock.Now())
}

// cacheNow is the refusal cache's time in µs: with WithStoreClock the time the
// script is given (scriptNow), so the cache and the script agree exactly;
// else monotonic time since the store began, read before the call.
func (s *RedisStore) cacheNow(scriptNow int64) int64 {
	if s.cfg.clock != nil {
		return scriptNow
	}
	return int64(time.Since(s.start) / time.Microsecond)
}

// checkArgs appends one check's script arguments: alg, n and its params.
func checkArgs(args []any, r *request) []any {
	p := r.p
	return append(args, int64(p.alg), r.n, p.count, p.burst, p.period, p.emission, p.den, p.tau, p.limit)
}

func (s *RedisStore) decide(ctx context.Context, r request) (Decision, error) {
	if err := s.err(); err != nil {
		return Decision{}, err
	}
	now, err := s.scriptNow()
	if err != nil {
		return Decision{}, err
	}
	var sent int64
	if s.cache != nil && r.n > 0 {
		sent = s.cacheNow(now)
		if d, ok := s.cache.lookup(r, sent); ok {
			return d, nil
		}
	}
	var d Decision
	if isMeter(r.p.alg) {
		d, err = s.decideMeter(ctx, r, now)
	} else {
		d, err = s.decideOne(ctx, r, now)
	}
	if err != nil {
		return Decision{}, err
	}
	if s.cache != nil && r.n > 0 && !d.Allowed {
		s.cache.record(r, d, sent)
	}
	return d, nil
}

// decideOne runs the algorithm's one.lua script, which replies with the
// Decision.
func (s *RedisStore) decideOne(ctx context.Context, r request, now int64) (Decision, error) {
	v, err := s.run(ctx, oneScripts[r.p.alg], []string{s.redisKey(r.p.alg, r.key)}, []any{oneArgs(now, &r, s.ttlFloor)})
	if err != nil {
		return Decision{}, err
	}
	var ds [1]Decision
	if err := parseDecisions(v, ds[:]); err != nil {
		return Decision{}, err
	}
	return ds[0], nil
}

// decideMeter runs a meter script (GCRA's, a bucket's), which writes the
// new state if the request fits and replies with the key's debt before
// it; meter, the definitions' own code, turns the debt into the Decision.
// (The script's test for "fits" is meter's: see meterArgs.)
func (s *RedisStore) decideMeter(ctx context.Context, r request, now int64) (Decision, error) {
	alg := r.p.alg
	debt, err := s.runInt(ctx, oneScripts[alg], []string{s.redisKey(alg, r.key)}, []any{meterArgs(now, &r, s.ttlFloor)})
	if err != nil {
		return Decision{}, err
	}
	if debt < 0 || debt >= maxExact {
		return Decision{}, storeBug("%v script replied debt %d", alg, debt)
	}
	var d Decision
	meter(&d, r.p, debt, now, r.n)
	return d, nil
}

// parseDecisions converts a script's reply, 5 integers per decision, into
// out.
func parseDecisions(v []int64, out []Decision) error {
	if len(v) != 5*len(out) {
		return storeBug("script replied %d numbers for %d decisions", len(v), len(out))
	}
	for i := range out {
		x := v[5*i : 5*i+5]
		if x[0] != 0 && x[0] != 1 || x[2] < 0 || x[3] < -1 || x[4] < 0 {
			return storeBug("unexpected script reply %v", x)
		}
		d := Decision{Allowed: x[0] == 1, Limit: int(x[1]), Remaining: int(x[2]), RetryAfter: us(x[3]), ResetAfter: us(x[4])}
		if x[3] == -1 {
			d.RetryAfter = Never
		}
		out[i] = d
	}
	return nil
}

func (s *RedisStore) decideAll(ctx context.Context, rs []request, out []Decision, commit bool) error {
	if err := s.err(); err != nil {
		return err
	}
	now, err := s.scriptNow()
	if err != nil {
		return err
	}
	groups := s.groups(rs)
	if len(groups) == 1 || !commit {
		for _, g := range groups {
			if err := s.runAll(ctx, rs, g, now, commit, out); err != nil {
				return err
			}
		}
		return nil
	}
	// Several slots: ask every group without counting first.
	for _, g := range groups {
		if err := s.runAll(ctx, rs, g, now, false, out); err != nil {
			return err
		}
	}
	if !Decisions(out).Allowed() {
		return nil
	}
	for _, g := range groups {
		if err := s.runAll(ctx, rs, g, now, true, out); err != nil {
			return err
		}
		if !groupAllowed(out, g) {
			return nil // earlier groups stay counted: see RedisStore
		}
	}
	return nil
}

func groupAllowed(out []Decision, g []int) bool {
	for _, i := range g {
		if !out[i].Allowed {
			return false
		}
	}
	return true
}

// runAll runs all.lua for the checks rs[g...], filling out[g...].
func (s *RedisStore) runAll(ctx context.Context, rs []request, g []int, now int64, commit bool, out []Decision) error {
	keys := make([]string, len(g))
	args := make([]any, 2, 3+9*len(g))
	args[0], args[1] = now, 0
	if commit {
		args[1] = 1
	}
	for j, i := range g {
		keys[j] = s.redisKey(rs[i].p.alg, rs[i].key)
		args = checkArgs(args, &rs[i])
	}
	args = append(args, s.ttlFloor)
	v, err := s.run(ctx, allScript, keys, args)
	if err != nil {
		return err
	}
	ds := make([]Decision, len(g))
	if err := parseDecisions(v, ds); err != nil {
		return err
	}
	for j, i := range g {
		out[i] = ds[j]
	}
	return nil
}

// groups splits the checks' indexes by slot (Cluster) or shard (Ring), in
// a fixed order; one group for a single server.
func (s *RedisStore) groups(rs []request) [][]int {
	if s.group == nil {
		all := make([]int, len(rs))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	by := map[string][]int{}
	var names []string
	for i := range rs {
		k := s.group(s.redisKey(rs[i].p.alg, rs[i].key))
		if _, ok := by[k]; !ok {
			names = append(names, k)
		}
		by[k] = append(by[k], i)
	}
	sort.Strings(names)
	out := make([][]int, len(names))
	for i, k := range names {
		out[i] = by[k]
	}
	return out
}

func (s *RedisStore) reset(ctx context.Context, alg Algorithm, key string) error {
	if err := s.err(); err != nil {
		return err
	}
	if s.cache != nil {
		s.cache.forget(alg, key)
	}
	_, err := redisscript.Call(ctx, s.cfg.callTimeout, s.inline, nil, s.gate, func(ctx context.Context) (int64, error) {
		return s.client.Del(ctx, s.redisKey(alg, key)).Result()
	})
	if err != nil {
		return storeError(err, nil)
	}
	return nil
}

// hashTag returns the part of key that Redis Cluster hashes: the text
// between the first '{' and the next '}' when not empty, else the key.
func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						return key[i+1 : j]
					}
					return key
				}
			}
			return key
		}
	}
	return key
}

// keySlot is Redis Cluster's slot of key: CRC16 (XMODEM) of its hash tag,
// modulo 16384.
func keySlot(key string) int {
	var crc uint16
	for _, b := range []byte(hashTag(key)) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
