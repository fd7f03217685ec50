package command

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// ExitOnSignal makes SIGINT and SIGTERM run cleanup and end the process
// with status 128 + the signal's number, as a shell reports a process the
// signal killed; for commands whose work cannot stop by itself (pipe, in
// the middle of a copy). cleanup runs at most once, whether through the
// signal or through the returned function, which also stops the watch.
func ExitOnSignal(cleanup func()) (stop func()) {
	once := sync.OnceFunc(cleanup)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			once()
			os.Exit(SignalStatus(sig))
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		once()
	}
}

// SignalStatus is the exit status of a process stopped by sig: 128 + its
// number (130 for SIGINT).
func SignalStatus(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 128 + int(syscall.SIGINT)
}
