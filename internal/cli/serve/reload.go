package serve

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Reload calls look every interval with false, and at once with true on
// SIGHUP (the operator saying: reload now), one call at a time, until the
// returned function is called; that function returns once no call runs.
// It is the loop of the commands that reload a configuration file as it
// changes: look compares what it reads with what it loaded.
func Reload(interval time.Duration, look func(forced bool)) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				look(false)
			case <-hup:
				look(true)
			case <-done:
				return
			}
		}
	})
	return sync.OnceFunc(func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	})
}
