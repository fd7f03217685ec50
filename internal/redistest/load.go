package redistest

import (
	"sync"
	"testing"
	"time"
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
