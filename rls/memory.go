package rls

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smoothrate/ratelimit/throttle"
)

// DefaultMaxBytes bounds a MemoryStore's window counters (and, apart, its
// additions' keys) when WithMaxBytes is not given: 256 MiB, far above
// what DefaultMaxKeys counters of ordinary descriptors take, so that it
// binds only a flood of long ones.
const DefaultMaxBytes = throttle.DefaultMaxBytes

// MinMaxBytes is the least WithMaxBytes takes: 16 KiB for each of the
// store's 64 shards, many keys of the longest descriptor part a Service
// keeps as it is (WithMaxDescriptorBytes).
const MinMaxBytes = 1 << 20

// WindowOverhead is what a MemoryStore counts for a window counter
// besides its key's bytes (WithMaxBytes): its map entry at the map's load
// and the key's own allocation.
const WindowOverhead = 64

// MemoryStore keeps every counter in this process: one instance needs
// nothing else. Safe for concurrent use.
//
// The reference's windows are aligned on the epoch, so every window of one
// length ends at the same instant. The store keeps its counters by the
// instant their window ends (one map per end: a handful at a time, one
// per window length in use) and drops a whole map, at once, in the first
// call after its end (any call: the store remembers the earliest end it
// holds). Nothing waits for a shard to fill, there is no goroutine, and
// no call scans counters. When the store is full, of keys (WithMaxKeys)
// or of bytes (WithMaxBytes), an insert first drops one live counter at
// random, at a cost that does not grow with the store: that descriptor
// starts again from zero.
type MemoryStore struct {
	cfg    storeConfig
	clock  func() time.Time
	shards [memShards]memShard
	lim    *throttle.MemoryStore
	// perShard and perShardBytes bound each shard's window counters.
	perShard, perShardBytes int
	// nextEnd is the earliest end of a window the store holds (unix
	// seconds; math.MaxInt64 for none): the first call at or after it
	// drops every ended window (dropEnded).
	nextEnd atomic.Int64
}

const memShards = 64

type memShard struct {
	mu sync.Mutex
	// gens are the shard's counters, one map per window end.
	gens []memGen
	// keys and bytes are what the gens hold (windowCost each).
	keys, bytes int
	// visited counts the counters and maps the shard looked at to make
	// room or to drop ended windows: the work of its inserts, which tests
	// count.
	visited   uint64
	evictions uint64
	_         [64]byte
}

// memGen is the counters of the windows that end at end.
type memGen struct {
	end   int64
	m     map[string]uint64
	bytes int
}

// MemoryStats are a MemoryStore's counters.
type MemoryStats struct {
	// Windows is the number of window counters held, and Bytes what they
	// cost (their keys' bytes plus WindowOverhead each).
	Windows, Bytes int
	// Evictions counts the live counters dropped because the store was
	// full.
	Evictions uint64
	// Additions are the counters of the throttle store the additions'
	// algorithms use.
	Additions throttle.MemoryStats
}

// NewMemoryStore returns an empty in-process store. Options:
// WithStoreClock, WithMaxKeys and WithMaxBytes; WithKeyPrefix and
// WithRefusalCache apply to a RedisStore only, so they are errors here
// (ErrInvalidOption), as any option that does not apply is.
func NewMemoryStore(opts ...StoreOption) (*MemoryStore, error) {
	cfg, err := buildStoreConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.refusalCache > 0 {
		return nil, fmt.Errorf("%w: WithRefusalCache applies to a RedisStore (a MemoryStore has no round trip to save)", ErrInvalidOption)
	}
	if cfg.setPrefix {
		return nil, fmt.Errorf("%w: WithKeyPrefix applies to a RedisStore (a MemoryStore's keys never leave the process)", ErrInvalidOption)
	}
	var topts []throttle.StoreOption
	if cfg.clock != nil {
		topts = append(topts, throttle.WithStoreClock(cfg.clock))
	}
	if cfg.maxKeys > 0 {
		topts = append(topts, throttle.WithMaxKeys(cfg.maxKeys))
	}
	if cfg.maxBytes > 0 {
		topts = append(topts, throttle.WithMaxBytes(cfg.maxBytes))
	}
	lim, err := newThrottleMemory(topts...)
	if err != nil {
		return nil, err
	}
	maxKeys := cmp.Or(cfg.maxKeys, throttle.DefaultMaxKeys)
	maxBytes := cmp.Or(cfg.maxBytes, DefaultMaxBytes)
	s := &MemoryStore{cfg: cfg, clock: cfg.nowFunc(), lim: lim, perShard: max(1, maxKeys/memShards), perShardBytes: maxBytes / memShards}
	s.nextEnd.Store(math.MaxInt64)
	return s, nil
}

// newThrottleMemory is the one place a throttle.MemoryStore is made.
func newThrottleMemory(opts ...throttle.StoreOption) (*throttle.MemoryStore, error) {
	s, err := throttle.NewMemoryStore(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return s, nil
}

func (s *MemoryStore) now() time.Time         { return s.clock() }
func (s *MemoryStore) limits() throttle.Store { return s.lim }
func (s *MemoryStore) traits() storeTraits    { return storeTraits{prefix: s.cfg.prefix, oneSlot: true} }

// Stats returns the store's counters. It locks one shard at a time, so the
// figures of a store in use are not one instant's.
func (s *MemoryStore) Stats() MemoryStats {
	var st MemoryStats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Windows += sh.keys
		st.Bytes += sh.bytes
		st.Evictions += sh.evictions
		sh.mu.Unlock()
	}
	st.Additions = s.lim.Stats()
	return st
}

// windowCost is what a counter of key costs its shard.
func windowCost(key string) int { return len(key) + WindowOverhead }

// ctxEvery is how many windows a store adds to between two looks at the
// call's context: a call of many thousand descriptors stops soon after
// its caller gives up, and a small one never looks.
const ctxEvery = 256

// cancelled is the error of a call whose context ended in the store.
// A store timeout (the Service's bound) is an outage; the caller's own end
// is ErrStore with the context's error.
func cancelled(ctx context.Context) error { return classify(ctx, ctx.Err()) }

func (s *MemoryStore) windows(ctx context.Context, ops []windowOp, mode countMode) error {
	now := s.clock().Unix()
	s.dropEnded(now)
	if mode == countWhole {
		return s.whole(ctx, ops)
	}
	for i := range ops {
		if i%ctxEvery == ctxEvery-1 {
			if err := ctx.Err(); err != nil {
				return cancelled(ctx)
			}
		}
		op := &ops[i]
		sh := s.shard(op.key)
		sh.mu.Lock()
		g := sh.gen(op.end)
		var cur uint64
		ok := false
		if g != nil {
			cur, ok = g.m[op.key]
		}
		op.after = min(cur+op.hits, maxCount)
		switch {
		case op.hits == 0:
		case ok:
			g.m[op.key] = op.after
		default:
			s.insert(sh, op.key, op.end, op.after)
		}
		sh.mu.Unlock()
	}
	return nil
}

// whole is windows with countWhole: every shard the call touches is
// locked (in ascending order, so two calls never deadlock) while the call
// is decided and, if it fits, counted.
func (s *MemoryStore) whole(ctx context.Context, ops []windowOp) error {
	var shards uint64 // one bit per shard
	for i := range ops {
		shards |= 1 << (fnv32(ops[i].key) % memShards)
	}
	if err := ctx.Err(); err != nil {
		return cancelled(ctx)
	}
	for i := range s.shards {
		if shards&(1<<i) != 0 {
			s.shards[i].mu.Lock()
		}
	}
	defer func() {
		for i := range s.shards {
			if shards&(1<<i) != 0 {
				s.shards[i].mu.Unlock()
			}
		}
	}()
	// The call's own count so far per key: two ops of one key see each
	// other, as in the script. A map past a few ops, so that the work is
	// linear.
	var seen map[string]uint64
	if len(ops) > 8 {
		seen = make(map[string]uint64, len(ops))
	}
	refused := false
	for i := range ops {
		if i%ctxEvery == ctxEvery-1 {
			if err := ctx.Err(); err != nil {
				return cancelled(ctx) // nothing written yet
			}
		}
		op := &ops[i]
		cur, ok := uint64(0), false
		if seen != nil {
			cur, ok = seen[op.key]
		} else {
			for j := i - 1; j >= 0 && !ok; j-- {
				if ops[j].key == op.key {
					cur, ok = ops[j].after, true
				}
			}
		}
		if !ok {
			cur = s.shard(op.key).count(op.key, op.end)
		}
		op.after = min(cur+op.hits, maxCount)
		if seen != nil {
			seen[op.key] = op.after
		}
		refused = refused || op.after > op.limit
	}
	for i := range ops {
		op := &ops[i]
		sh := s.shard(op.key)
		switch {
		case refused && op.after <= op.limit:
			op.after = sh.count(op.key, op.end) // what it holds, unchanged
		case !refused && op.hits > 0:
			s.put(sh, op.key, op.end, op.after) // in order: the last of a key's ops writes its sum
		}
	}
	return nil
}

func (s *MemoryStore) undo(_ context.Context, ops []windowOp) error {
	for i := range ops {
		op := &ops[i]
		sh := s.shard(op.key)
		sh.mu.Lock()
		if g := sh.gen(op.end); g != nil {
			if c, ok := g.m[op.key]; ok {
				c -= min(c, op.hits)
				g.m[op.key] = c
			}
		}
		op.after = sh.count(op.key, op.end)
		sh.mu.Unlock()
	}
	return nil
}

func (s *MemoryStore) shard(key string) *memShard { return &s.shards[fnv32(key)%memShards] }

// gen returns the counters of the windows ending at end, or nil.
func (sh *memShard) gen(end int64) *memGen {
	for i := range sh.gens {
		if sh.gens[i].end == end {
			return &sh.gens[i]
		}
	}
	return nil
}

// count is what key's window, ending at end, holds (0: absent).
func (sh *memShard) count(key string, end int64) uint64 {
	if g := sh.gen(end); g != nil {
		return g.m[key]
	}
	return 0
}

// put sets key's count (shard locked), making room first for a new
// counter when the shard is full.
func (s *MemoryStore) put(sh *memShard, key string, end int64, count uint64) {
	if g := sh.gen(end); g != nil {
		if _, ok := g.m[key]; ok {
			g.m[key] = count
			return
		}
	}
	s.insert(sh, key, end, count)
}

// insert adds key, absent, with count (shard locked), making room first
// when the shard is full.
func (s *MemoryStore) insert(sh *memShard, key string, end int64, count uint64) {
	cost := windowCost(key)
	for sh.keys > 0 && (sh.keys >= s.perShard || sh.bytes+cost > s.perShardBytes) {
		sh.evict()
	}
	g := sh.gen(end) // after evict, which never removes a map
	if g == nil {
		sh.gens = append(sh.gens, memGen{end: end, m: map[string]uint64{}})
		g = &sh.gens[len(sh.gens)-1]
		s.lowerNextEnd(end)
	}
	g.m[key] = count
	g.bytes += cost
	sh.keys++
	sh.bytes += cost
}

// evict drops one live counter, chosen at random: a map in proportion to
// its counters, then the first key of its iteration, which Go's map
// starts at a random place. Its cost does not grow with the shard.
func (sh *memShard) evict() {
	n := rand.IntN(sh.keys)
	for i := range sh.gens {
		g := &sh.gens[i]
		sh.visited++
		if n >= len(g.m) {
			n -= len(g.m)
			continue
		}
		for k := range g.m {
			sh.visited++
			cost := windowCost(k)
			delete(g.m, k)
			g.bytes -= cost
			sh.keys--
			sh.bytes -= cost
			sh.evictions++
			return
		}
	}
}

// windowGrace is how long (s) a window is kept after its end: a call
// whose service read the time just before the end and whose store reads
// it after must still find the window's counter (the reference's Redis
// keeps it far longer), not a fresh one.
const windowGrace = 1

// dropEnded drops the windows that ended windowGrace or more before now,
// in every shard, once now reaches the earliest end the store holds plus
// windowGrace: a map per window end, in O(1) each.
func (s *MemoryStore) dropEnded(now int64) {
	next := s.nextEnd.Load()
	if now < next+windowGrace || !s.nextEnd.CompareAndSwap(next, math.MaxInt64) {
		return
	}
	earliest := int64(math.MaxInt64)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		kept := sh.gens[:0]
		for _, g := range sh.gens {
			sh.visited++
			if g.end+windowGrace <= now {
				sh.keys -= len(g.m)
				sh.bytes -= g.bytes
				continue
			}
			kept = append(kept, g)
			earliest = min(earliest, g.end)
		}
		clear(sh.gens[len(kept):])
		sh.gens = kept
		sh.mu.Unlock()
	}
	s.lowerNextEnd(earliest)
}

// lowerNextEnd makes nextEnd at most end.
func (s *MemoryStore) lowerNextEnd(end int64) {
	for {
		cur := s.nextEnd.Load()
		if end >= cur || s.nextEnd.CompareAndSwap(cur, end) {
			return
		}
	}
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
