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
	// (countEvery, countWhole); nil for a Cluster or a Ring, whose keys
	// live on several servers.
	batch [countUndo]*windowBatcher
	// gate dials the server before a call while it is not known to be
	// reachable, so that a client pointed nowhere fails at once instead
	// of logging go-redis's dial errors (redisscript.Gate).
	gate *redisscript.Gate
}

// gateTimeout bounds the gate's own dial to a server not known to be
// reachable; callers wait for it no longer than their own bound.
const gateTimeout = time.Second

// NewRedisStore returns a store over client. Options: WithKeyPrefix,
// WithStoreClock, WithRefusalCache (WithMaxKeys and WithMaxBytes are
// errors: they bound a MemoryStore). It does not contact Redis: Check
// does.
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
	if cfg.maxBytes > 0 {
		return nil, fmt.Errorf("%w: WithMaxBytes applies to a MemoryStore (Redis bounds its memory with maxmemory)", ErrInvalidOption)
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
		s.batch = [2]*windowBatcher{countEvery: {client: c, mode: "0"}, countWhole: {client: c, mode: "1"}}
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
	ops := []windowOp{{key: s.cfg.prefix + "rls:check", hits: 0, limit: 1, ttl: 1, keep: 1}}
	return s.windows(ctx, ops, countEvery)
}

func (s *RedisStore) windows(ctx context.Context, ops []windowOp, mode countMode) error {
	return s.windowsWithin(ctx, ops, mode, 0)
}

// windowsWithin is windows bounded by timeout as well as by ctx (0: by ctx
// only). A call that goes in a batch bounds its wait with a pooled timer
// instead of a context of its own; another, with a context.
func (s *RedisStore) windowsWithin(ctx context.Context, ops []windowOp, mode countMode, timeout time.Duration) error {
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
				ops[i].after, ops[i].cached = min(sat.AddUint(c, ops[i].hits), maxCount), true
				continue
			}
			idx = append(idx, i)
			pending = append(pending, ops[i])
		}
		if len(pending) == 0 {
			return nil
		}
		if mode == countWhole && len(pending) < len(ops) {
			// The call is refused: nothing of it is counted, and its
			// other windows are only read.
			for i := range pending {
				pending[i].hits = 0
			}
			if err := s.send(ctx, pending, countEvery, timeout); err != nil {
				return err
			}
			for j, i := range idx {
				op := &ops[i]
				op.after = pending[j].after
				if a := min(op.after+op.hits, maxCount); a > op.limit {
					op.after = a
				}
			}
			return nil
		}
	}
	if err := s.send(ctx, pending, mode, timeout); err != nil {
		return err
	}
	if s.refused != nil {
		for j, i := range idx {
			op := pending[j]
			ops[i].after = op.after
			stored := op.after // what the counter holds now
			if mode == countWhole && op.after > op.limit {
				stored = op.after - min(op.after, op.hits)
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

// send runs ops past the gate: in the next batch when the store batches
// and the call fits in one (maxBatchKeys); otherwise on its own (runAlone),
// so that a call of many windows never holds up the batch that the others
// share.
func (s *RedisStore) send(ctx context.Context, ops []windowOp, mode countMode, timeout time.Duration) error {
	var b *windowBatcher
	if mode < countUndo {
		b = s.batch[mode]
	}
	if b == nil || len(ops) > maxBatchKeys {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = redisscript.WithTimeout(ctx, timeout)
			defer cancel()
		}
		timeout = 0
	}
	if err := s.enter(ctx, timeout); err != nil {
		return err
	}
	var err error
	if b != nil && len(ops) <= maxBatchKeys {
		err = b.windows(ctx, ops, timeout)
	} else {
		err = s.runAlone(ctx, ops, mode)
	}
	if err != nil {
		err = s.gate.Refine(err)
		s.gate.Leave(err)
	}
	return err
}

// runAlone runs a call's windows on a connection of its own, returning
// when they are counted or ctx ends (the client may read past a deadline:
// the work then goes on apart, and its results are never read). A call
// that counts every hit goes in scripts of at most maxBatchKeys windows,
// one after the other, so that Redis serves other clients between them,
// and stops before the next one once ctx has ended: what an abandoned
// call has not sent is never sent. A call counted whole is one script: its
// windows are counted together or not at all.
func (s *RedisStore) runAlone(ctx context.Context, ops []windowOp, mode countMode) error {
	done := make(chan error, 1)
	go func() { done <- s.runChunks(ctx, ops, mode) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return cancelled(ctx)
	}
}

func (s *RedisStore) runChunks(ctx context.Context, ops []windowOp, mode countMode) error {
	switch {
	case mode == countWhole && s.sharded:
		return s.runWholeSharded(ctx, ops)
	case mode == countWhole:
		return s.runOne(ctx, ops, "1", len(ops))
	}
	arg := "0"
	if mode == countUndo {
		arg = "2"
	}
	return chunks(ctx, ops, func(ops []windowOp) error {
		if s.sharded && len(ops) > 1 {
			return s.runPipelined(ctx, ops, arg)
		}
		return s.runOne(ctx, ops, arg)
	})
}

// chunks runs f on ops maxBatchKeys at a time, while ctx lasts.
func chunks(ctx context.Context, ops []windowOp, f func([]windowOp) error) error {
	for len(ops) > 0 {
		if err := ctx.Err(); err != nil {
			return cancelled(ctx)
		}
		n := min(len(ops), maxBatchKeys)
		if err := f(ops[:n]); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// runWholeSharded counts a call whole in a Cluster or a Ring, whose keys
// no one script sees: each window is counted on its own if it fits, in one
// pipeline, and if any does not, the others' hits are taken back (undo)
// in a second one. Between the two, other calls see hits that are then
// taken back: they may be refused for them, never admitted past a limit.
func (s *RedisStore) runWholeSharded(ctx context.Context, ops []windowOp) error {
	if err := s.runPipelined(ctx, ops, "1"); err != nil {
		return err
	}
	if !anyOver(ops) {
		return nil
	}
	var counted []windowOp
	var at []int
	for i := range ops {
		if ops[i].hits > 0 && ops[i].after <= ops[i].limit {
			counted = append(counted, ops[i])
			at = append(at, i)
		}
	}
	if len(counted) == 0 {
		return nil
	}
	if err := s.runPipelined(ctx, counted, "2"); err != nil {
		return err
	}
	for j, i := range at {
		ops[i].after = counted[j].after
	}
	return nil
}

func (s *RedisStore) undo(ctx context.Context, ops []windowOp) error {
	return s.send(ctx, ops, countUndo, 0)
}

// scriptArgs is the windows script's keys and arguments for ops in mode;
// with mode "1", calls are the calls' numbers of ops, in order.
func scriptArgs(ops []windowOp, mode string, calls ...int) (keys []string, args []any) {
	keys = make([]string, len(ops))
	args = make([]any, 1, 1+3*len(ops)+len(calls))
	args[0] = mode
	for i, op := range ops {
		keys[i] = op.key
		args = append(args, op.hits, op.limit, max(op.ttl, op.keep))
	}
	for _, n := range calls {
		args = append(args, n)
	}
	return keys, args
}

func (s *RedisStore) runOne(ctx context.Context, ops []windowOp, mode string, calls ...int) error {
	keys, args := scriptArgs(ops, mode, calls...)
	v, err := windowsScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return classify(ctx, err)
	}
	return fill(ops, v)
}

// runPipelined runs ops in a Cluster or a Ring, one script per key (in
// mode "1", each its own call).
func (s *RedisStore) runPipelined(ctx context.Context, ops []windowOp, mode string) error {
	var calls []int
	if mode == "1" {
		calls = []int{1}
	}
	// One EVALSHA per key, all in one pipeline; then EVAL, in a second
	// one, for the keys whose node did not have the script (and only
	// those: the others have counted already).
	cmds := make([]*redis.Cmd, len(ops))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range ops {
			keys, args := scriptArgs(ops[i:i+1], mode, calls...)
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
				keys, args := scriptArgs(ops[i:i+1], mode, calls...)
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
