package distributed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// debited reads the permits a state has debited so far, next/interval −
// stored (resync moves time from next into stored and leaves it
// unchanged; a reservation adds its permits), from the packed state.
func debited(ctx context.Context, c *redis.Client, key string) (float64, error) {
	v, err := c.HGet(ctx, key, "e").Result()
	if err != nil {
		return 0, err
	}
	if len(v) != 8*len(stateFields) {
		return 0, fmt.Errorf("state of %d bytes", len(v))
	}
	f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[8*i:]))) }
	return f(4)/f(3) - f(1), nil // next, interval, stored
}

// TestReplicationLagForgetsLittle measures the "+ R × replication lag"
// row of the bounds: a fleet leases from a primary with one replica on
// loopback while a sampler reads the state on the replica and then on the
// primary. The difference is what a failover at that moment would forget
// (debits the replica has not applied yet), an upper bound since the
// primary is read last (a lease between the two reads counts as lag; a
// refund between them makes the difference negative). It must stay within
// one lease per process: on loopback the replica applies each script's
// writes well before the next lease round. A sample whose two reads took
// more than sampleWindow is dropped (and counted): every lease made
// between the reads counts as lag, so such a sample measures how long the
// sampler was held up (with other packages' tests on both cores, a CI
// rehearsal once saw 241 permits, 120 ms at this rate, with a p99 of 2),
// not the replica. The replica's own process can be held up too: with the
// other packages' tests on both cores a CI rehearsal saw a worst sample
// of 550 permits (275 ms behind) with a median and a p99 of 0. That is what the bound's "+ R × replication lag" term is for, but it
// measures the machine's scheduling, not the design; so the design's
// claim is checked at the 99th percentile (within one lease per process),
// and the worst sample only against a replica a whole second behind.
func TestReplicationLagForgetsLittle(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	pc, rc := newClient(t, primary), newClient(t, replica)
	ctx := context.Background()
	// WAIT returns once the replica has acknowledged the write: the link
	// is up and in sync.
	if err := pc.Set(ctx, "sync", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	const (
		rate  = 2000.0
		procs = 4
		run   = 1500 * time.Millisecond
	)
	lims := make([]*Limiter, procs)
	for i := range lims {
		l, err := New(newClient(t, primary), "repl", rate, WithProcessID(fmt.Sprint("r", i)), WithCallTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = l
	}
	runCtx, cancel := context.WithTimeout(ctx, run)
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range lims {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if _, err := l.Acquire(runCtx, 1); err != nil {
						if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
							t.Errorf("Acquire: %v", err)
						}
						return
					}
				}
			}()
		}
	}
	key := keysOf("repl")[0]
	const sampleWindow = 2 * time.Millisecond
	var lags []float64
	slow := 0
	for runCtx.Err() == nil {
		start := time.Now()
		r, err1 := debited(ctx, rc, key)
		p, err2 := debited(ctx, pc, key)
		if err1 != nil || err2 != nil {
			continue // not created yet, or not replicated yet
		}
		if time.Since(start) > sampleWindow {
			slow++
			continue
		}
		lags = append(lags, p-r)
	}
	wg.Wait()
	var largest int64
	for _, l := range lims {
		largest = max(largest, l.Stats().LargestLease)
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(lags) < 100 {
		t.Fatalf("only %d samples of the replication lag", len(lags))
	}
	slices.Sort(lags)
	worst, median, p99 := lags[len(lags)-1], lags[len(lags)/2], lags[len(lags)*99/100]
	t.Logf("%d samples (%d more dropped: reads %v or more apart): permits debited on the primary but not yet on the replica: median %.1f, p99 %.1f, max %.1f (at %v/s: %.2f, %.2f, %.2f ms of lag); largest lease %d",
		len(lags), slow, sampleWindow, median, p99, worst, rate, 1e3*median/rate, 1e3*p99/rate, 1e3*worst/rate, largest)
	if p99 > float64(procs*largest) {
		t.Errorf("in 1 %% of samples a failover could have forgotten %.1f permits or more, more than one lease per process (%d)", p99, procs*largest)
	}
	if worst > rate {
		t.Errorf("a failover could have forgotten %.1f permits, the replica a second or more behind", worst)
	}
}
