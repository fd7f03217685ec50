package rls

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/internal/sat"
	"github.com/smoothrate/ratelimit/throttle"
)

//go:embed lua/windows.lua
var windowsLua string

// The windows script packs no doubles: it runs without the Prelude, whose
// definitions Redis would otherwise run with every call.
var windowsScript = redisscript.NewPlain(windowsLua)

// RedisStore keeps every counter in Redis (a server, a failover group or a
// Cluster), shared by every instance that uses it.
//
// The reference's windows are counters "prefix + domain_key_value_..._start"
// (the reference's own keys, so both can share a Redis during a migration),
// added to by one Lua script per call for all the call's descriptors: one
// round trip however many descriptors, and an EXPIRE only when a counter is
// created, not with every hit. In a Cluster the descriptors' keys live in
// different slots, so the store sends one script per key in one pipeline:
// go-redis sends each node its share at once, one round trip per node, in
// parallel; a Ring likewise. On one server (or a failover group), calls
// that arrive while a round trip is in flight share the next one: one
// script over all their keys, with no waiting window (see windowBatcher).
// The additions' algorithms run throttle's RedisStore.
//
// Time is this process's clock, as in the reference: instances sharing a
// Redis must have synchronised clocks (the windows are aligned on the
// epoch, so two instances a second apart count a second's hits in
// different windows at the edges).
type RedisStore struct {
	client redis.UniversalClient
	// sharded: a Cluster or a Ring, whose keys live on several nodes:
	// one script per key, pipelined.
	sharded bool
	cfg     storeConfig
	clock   func() time.Time
	lim     *throttle.RedisStore
	refused *windowCache // nil: no refusal cache
	// batch sends concurrent calls' windows in one script, by mode
	// (counting every hit, or only admitted ones); nil for a Cluster or
	// a Ring, whose keys live on several servers.
	batch [2]*windowBatcher
	// gate dials the server before a call while it is not known to be
	// reachable, so that a client pointed nowhere fails at once instead
	// of logging go-redis's dial errors (redisscript.Gate).
	gate *redisscript.Gate
}

// gateTimeout bounds the gate's own dial to a server not known to be
// reachable; callers wait for it no longer than their own bound.
const gateTimeout = time.Second

// NewRedisStore returns a store over client. Options: WithKeyPrefix,
// WithStoreClock, WithRefusalCache. It does not contact Redis: Check does.
func NewRedisStore(client redis.UniversalClient, opts ...StoreOption) (*RedisStore, error) {
	cfg, err := buildStoreConfig(opts)
	if err != nil {
		return nil, err
	}
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	}
	if cfg.maxKeys > 0 {
		return nil, fmt.Errorf("%w: WithMaxKeys applies to a MemoryStore (Redis bounds its keys by TTL)", ErrInvalidOption)
	}
	var topts []throttle.StoreOption
	if cfg.clock != nil {
		topts = append(topts, throttle.WithStoreClock(cfg.clock))
	}
	if cfg.prefix != "" {
		topts = append(topts, throttle.WithKeyPrefix(cfg.prefix+throttle.DefaultKeyPrefix))
	}
	if cfg.refusalCache > 0 {
		topts = append(topts, throttle.WithRefusalCache(cfg.refusalCache))
	}
	// The Service bounds each call (WithStoreTimeout): throttle's own
	// bound only backs it up.
	topts = append(topts, throttle.WithCallTimeout(time.Minute))
	lim, err := throttle.NewRedisStore(client, topts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	s := &RedisStore{client: client, cfg: cfg, clock: cfg.nowFunc(), lim: lim, gate: redisscript.NewGate(client, gateTimeout)}
	switch c := client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		s.sharded = true
	case *redis.Client:
		s.batch = [2]*windowBatcher{{client: c, mode: "0"}, {client: c, mode: "1"}}
	}
	if cfg.refusalCache > 0 {
		s.refused = newWindowCache(cfg.refusalCache)
	}
	return s, nil
}

func (s *RedisStore) now() time.Time         { return s.clock() }
func (s *RedisStore) limits() throttle.Store { return s.lim }

func (s *RedisStore) traits() storeTraits {
	return storeTraits{prefix: s.cfg.prefix, remote: true, oneSlot: !s.sharded, timedWindows: s.batch[0] != nil}
}

// Check asks Redis whether the store can work: it runs the windows' script
// on a key of its own without counting anything. A wrong password or
// database, or a Cluster answered as a single server, is an error wrapping
// ErrMisconfigured; no answer, ErrUnavailable.
func (s *RedisStore) Check(ctx context.Context) error {
	ops := []windowOp{{key: s.cfg.prefix + "rls:check", hits: 0, limit: 1, ttl: 1}}
	return s.windows(ctx, ops, false)
}

func (s *RedisStore) windows(ctx context.Context, ops []windowOp, onlyAdmitted bool) error {
	return s.windowsWithin(ctx, ops, onlyAdmitted, 0)
}

// windowsWithin is windows bounded by timeout as well as by ctx (0: by ctx
// only). A batching store bounds the wait with a pooled timer instead of a
// context of its own per call; another store, with a context.
func (s *RedisStore) windowsWithin(ctx context.Context, ops []windowOp, onlyAdmitted bool, timeout time.Duration) error {
	if timeout > 0 && s.batch[0] == nil {
		var cancel context.CancelFunc
		ctx, cancel = redisscript.WithTimeout(ctx, timeout)
		defer cancel()
	}
	now := s.clock().Unix()
	// The refusal cache: a window already over its limit stays over until
	// it ends, whatever is added (its counter only grows).
	pending := ops
	var idx []int
	if s.refused != nil {
		idx = make([]int, 0, len(ops))
		pending = make([]windowOp, 0, len(ops))
		for i := range ops {
			if c, ok := s.refused.get(ops[i].key, now); ok && c > ops[i].limit {
				ops[i].after, ops[i].cached = sat.AddUint(c, ops[i].hits), true
				continue
			}
			idx = append(idx, i)
			pending = append(pending, ops[i])
		}
		if len(pending) == 0 {
			return nil
		}
	}
	mode, m := "0", 0
	if onlyAdmitted {
		mode, m = "1", 1
	}
	if err := s.enter(ctx, timeout); err != nil {
		return err
	}
	var err error
	if b := s.batch[m]; b != nil {
		err = b.windows(ctx, pending, timeout)
	} else if s.sharded && len(pending) > 1 {
		err = s.runPipelined(ctx, pending, mode)
	} else {
		err = s.runOne(ctx, pending, mode)
	}
	if err != nil {
		s.gate.Leave(err)
		return err
	}
	if s.refused != nil {
		for j, i := range idx {
			op := pending[j]
			ops[i].after = op.after
			stored := op.after // what the counter holds now
			if onlyAdmitted && op.after > op.limit {
				stored = op.after - op.hits
			}
			// Cached only when strictly over: every later call in the
			// window, whatever its hits, is then over too.
			if stored > op.limit {
				s.refused.put(op.key, stored, now+op.ttl)
			}
		}
	}
	return nil
}

func scriptArgs(ops []windowOp, mode string) (keys []string, args []any) {
	keys = make([]string, len(ops))
	args = make([]any, 1, 1+3*len(ops))
	args[0] = mode
	for i, op := range ops {
		keys[i] = op.key
		args = append(args, op.hits, op.limit, op.ttl)
	}
	return keys, args
}

func (s *RedisStore) runOne(ctx context.Context, ops []windowOp, mode string) error {
	keys, args := scriptArgs(ops, mode)
	v, err := windowsScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return classify(ctx, err)
	}
	return fill(ops, v)
}

func (s *RedisStore) runPipelined(ctx context.Context, ops []windowOp, mode string) error {
	// One EVALSHA per key, all in one pipeline; then EVAL, in a second
	// one, for the keys whose node did not have the script (and only
	// those: the others have counted already).
	cmds := make([]*redis.Cmd, len(ops))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range ops {
			keys, args := scriptArgs(ops[i:i+1], mode)
			cmds[i] = p.EvalSha(ctx, windowsScript.Hash(), keys, args...)
		}
		return nil
	})
	var again []int
	for i, c := range cmds {
		if e := c.Err(); e != nil && redis.HasErrorPrefix(e, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		_, err = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				keys, args := scriptArgs(ops[i:i+1], mode)
				cmds[i] = p.Eval(ctx, windowsScript.Source(), keys, args...)
			}
			return nil
		})
	}
	for i, c := range cmds {
		v, e := c.Int64Slice()
		if e != nil {
			return classify(ctx, e)
		}
		if e := fill(ops[i:i+1], v); e != nil {
			return e
		}
	}
	return classify(ctx, err)
}

func fill(ops []windowOp, v []int64) error {
	if len(v) != len(ops) {
		return misconfigured("the windows script answered %d counts for %d keys", len(v), len(ops))
	}
	for i := range ops {
		if v[i] < 0 {
			return misconfigured("window %q holds something other than a count", ops[i].key)
		}
		ops[i].after = uint64(v[i])
	}
	return nil
}

// enter passes the gate: at once while Redis is known to be reachable;
// otherwise after the gate's probe, waiting no longer than ctx and timeout
// allow.
func (s *RedisStore) enter(ctx context.Context, timeout time.Duration) error {
	if s.gate.Open() {
		return nil
	}
	if timeout > 0 && s.batch[0] != nil { // windowsWithin bounded ctx otherwise
		var cancel context.CancelFunc
		ctx, cancel = redisscript.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return classify(ctx, s.gate.Enter(ctx))
}

// room names this package in its store errors.
const room = "rls"

// classify is err, a Redis call's under ctx, as this package's store error
// (redisscript.Error: by the project's one classifier, ErrUnavailable for
// no answer: the network, a timeout, a server loading, failing over or out
// of memory; ErrMisconfigured for an answer no retry will change:
// authentication, a database or cluster mode the server lacks, a key of
// another type; ErrStore alone for a bug or the caller's own end). A call
// that ended with ctx is classified by what ended ctx
// (redisscript.Ended): the store timeout is an outage.
func classify(ctx context.Context, err error) error {
	return redisscript.Fail(room, redisscript.Ended(ctx, err))
}

// storeBug is the error of a state nothing here expects: it matches
// ErrStore only, and is answered INTERNAL.
func storeBug(format string, args ...any) error {
	return &redisscript.Error{Room: room, Class: redisscript.Bug, Err: fmt.Errorf(format+" (a bug)", args...)}
}

// misconfigured is a store error no retry fixes.
func misconfigured(format string, args ...any) error {
	return &redisscript.Error{Room: room, Class: redisscript.Misconfigured, Err: fmt.Errorf(format, args...)}
}

// windowCache remembers windows over their limit, by key (the key names
// the window, so an entry is never wrong: it only grows stale when the
// window ends, and is then dropped).
type windowCache struct {
	mu  sync.Mutex
	max int
	m   map[string]cachedWindow
}

type cachedWindow struct {
	count uint64
	end   int64
}

func newWindowCache(n int) *windowCache {
	return &windowCache{max: n, m: map[string]cachedWindow{}}
}

func (c *windowCache) get(key string, now int64) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.m[key]
	if ok && now >= w.end {
		delete(c.m, key)
		return 0, false
	}
	return w.count, ok
}

func (c *windowCache) put(key string, count uint64, end int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		// Full: drop one entry; Go's map order makes it a random one,
		// bounded work per insert.
		seen := 0
		for k := range c.m {
			delete(c.m, k)
			if seen++; seen == 1 {
				break
			}
		}
	}
	c.m[key] = cachedWindow{count: count, end: end}
}

// itoa is strconv.FormatInt for window starts.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
