package throttle

import (
	"context"
	"sync"
	"time"

	"github.com/smoothrate/ratelimit"
)

// MemoryStore keeps keyed-limiter state in this process. It is the
// embedded default: no server, safe for concurrent use.
//
// PLACEHOLDER: one mutex and one map, unbounded. To be replaced by the
// sharded, bounded LRU store.
type MemoryStore struct {
	cfg   storeConfig
	clock ratelimit.Clock

	mu   sync.Mutex
	keys map[memKey]*memEntry
}

type memKey struct {
	alg Algorithm
	key string
}

type memEntry struct {
	st  state
	log []int64
}

func (e *memEntry) Len() int       { return len(e.log) }
func (e *memEntry) At(i int) int64 { return e.log[i] }

// NewMemoryStore returns an empty store.
func NewMemoryStore(opts ...StoreOption) *MemoryStore {
	cfg := buildStoreConfig(opts)
	clk := cfg.clock
	if clk == nil {
		clk = ratelimit.SystemClock{}
	}
	return &MemoryStore{cfg: cfg, clock: clk, keys: make(map[memKey]*memEntry)}
}

func (s *MemoryStore) err() error {
	if s == nil {
		return ErrNilStore
	}
	return s.cfg.err()
}

func (s *MemoryStore) now() (int64, error) {
	if s.clock == nil {
		return micros(time.Now())
	}
	return micros(s.clock.Now())
}

func (s *MemoryStore) decide(ctx context.Context, r request) (Decision, error) {
	if err := s.err(); err != nil {
		return Decision{}, err
	}
	now, err := s.now()
	if err != nil {
		return Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, _ := s.decideLocked(r, now, true)
	return d, nil
}

// decideLocked decides r; with commit it writes what an allowed request
// writes. It reports whether the request was allowed.
func (s *MemoryStore) decideLocked(r request, now int64, commit bool) (Decision, bool) {
	k := memKey{r.p.alg, r.key}
	e := s.keys[k]
	if r.p.alg == SlidingLog {
		if e == nil {
			e = &memEntry{}
		}
		d, expired, at, write := decideSlidingLog(r.p, e, now, r.n)
		if commit && write {
			e.log = e.log[expired:]
			for range r.n {
				e.log = append(e.log, at)
			}
			s.keys[k] = e
		}
		return d, d.Allowed
	}
	var st state
	if e != nil {
		st = e.st
	}
	d, next, write := decideState(r.p, st, e != nil, now, r.n)
	if commit && write {
		if e == nil {
			e = &memEntry{}
			s.keys[k] = e
		}
		e.st = next
	}
	return d, d.Allowed
}

func (s *MemoryStore) decideAll(ctx context.Context, rs []request, out []Decision) error {
	if err := s.err(); err != nil {
		return err
	}
	now, err := s.now()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all := true
	for i, r := range rs {
		var ok bool
		out[i], ok = s.decideLocked(r, now, false)
		all = all && ok
	}
	if !all {
		return nil
	}
	for i, r := range rs {
		out[i], _ = s.decideLocked(r, now, true)
	}
	return nil
}

func (s *MemoryStore) reset(ctx context.Context, alg Algorithm, key string) error {
	if err := s.err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, memKey{alg, key})
	return nil
}
