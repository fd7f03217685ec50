package redistest

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Call is one call of a load: how long it took and its error.
type Call struct {
	Took time.Duration
	Err  error
}

// KillUnderLoad runs call in a loop in each of workers goroutines; once
// every worker has had a call succeed, it kills s (kill -9, waiting for the
// process to end) while the calls go on, and keeps the load on until every
// worker has made after calls that began after the kill. It returns those
// calls, per worker. The calls in flight at the kill are not among them;
// the first of each worker's may still have found a pooled connection to
// the dead server.
//
// Nothing waits on a timer: the load runs at the calls' own pace.
func KillUnderLoad(t testing.TB, s *Server, workers, after int, call func() error) [][]Call {
	t.Helper()
	var (
		warm   sync.WaitGroup
		done   sync.WaitGroup
		killed = make(chan struct{})
		got    = make([][]Call, workers)
	)
	warm.Add(workers)
	done.Add(workers)
	for w := range workers {
		go func() {
			defer done.Done()
			warmed, recording := false, false
			for len(got[w]) < after {
				if !recording {
					select {
					case <-killed:
						recording = true
					default:
					}
				}
				start := time.Now()
				err := call()
				took := time.Since(start)
				if !warmed && err == nil {
					warmed = true
					warm.Done()
				}
				if recording {
					got[w] = append(got[w], Call{Took: took, Err: err})
				}
			}
		}()
	}
	warm.Wait()
	s.Kill()
	close(killed)
	done.Wait()
	return got
}

// SlowRetries makes a client retry a failed command three times, a minute
// apart: retries that outlast any bound a test sets, as go-redis's default
// backoff (8 to 512 ms) outlasts a 50 ms store timeout. A call to a dead
// server then ends only by its bound, with a bare context error.
func SlowRetries(o *redis.Options) {
	o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff = 3, time.Minute, time.Minute
}

// CheckFast fails t for each worker of calls (KillUnderLoad's) that made
// more than allowed calls slower than fast: a store that fails fast keeps
// the slow ones to those that met the dead server.
func CheckFast(t testing.TB, calls [][]Call, fast time.Duration, allowed int) {
	t.Helper()
	for w, cs := range calls {
		slow := 0
		for _, c := range cs {
			if c.Took > fast {
				slow++
			}
		}
		if slow > allowed {
			t.Errorf("worker %d: %d of %d calls after the kill took over %v; want at most %d", w, slow, len(cs), fast, allowed)
		}
	}
}
