package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/distributed"
)

// The distributed limiter's lease script, as a fleet calls it: procs
// distributed.Limiters (one process id each) share one name at a rate far
// above what the loop asks, and a loop calls TryAcquire(1, 0) on each in
// turn until the fleet has made n lease calls (Stats.RedisCalls, which
// counts every script call, the background prefetches included). With one
// process the leases find their registry slot begun and nothing to move,
// except when a slot turns (every 0.5 s, which under callgrind is every
// few dozen leases); with 1 000, each process's lease moves its count in
// the demand histogram, as in a large fleet where each process calls about
// once per slot. Every limiter makes its first lease (the join, which
// lease.lua answers) before the counters are zeroed.
func leaseInstructions(srv *cgServer, c *redis.Client, procs, n int) (float64, error) {
	ctx := context.Background()
	name := fmt.Sprint("lease", procs)
	lims := make([]*distributed.Limiter, procs)
	defer func() {
		for _, l := range lims {
			if l != nil {
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				_ = l.Close(cctx)
				cancel()
			}
		}
	}()
	for i := range lims {
		l, err := distributed.New(c, name, 1e9, distributed.WithProcessID(fmt.Sprint("p", i)),
			distributed.WithCallTimeout(time.Minute))
		if err != nil {
			return 0, err
		}
		lims[i] = l
		if !l.TryAcquire(1, 0) {
			return 0, fmt.Errorf("process %d: first lease refused: %v", i, l.Stats().LastError)
		}
	}
	calls := func() (total int64, err error) {
		for _, l := range lims {
			st := l.Stats()
			total += st.RedisCalls
			if st.LastError != nil {
				err = st.LastError
			}
		}
		return total, err
	}
	if err := srv.zero(); err != nil {
		return 0, err
	}
	before, err := calls()
	if err != nil {
		return 0, err
	}
	made := int64(0)
	for i := 0; made < int64(n); i = (i + 1) % procs {
		lims[i].TryAcquire(1, 0)
		if made, err = calls(); err != nil {
			return 0, err
		}
		made -= before
	}
	total, err := srv.dump()
	if err != nil {
		return 0, err
	}
	return float64(total) / float64(made), nil
}
