//go:build unix

package serve

import (
	"syscall"
	"testing"
	"time"
)

// TestReload: the ticks look unforced, SIGHUP forced (the test process
// would die of SIGHUP if Reload did not take it); stop waits for the loop
// and may be called again.
func TestReload(t *testing.T) {
	looks := make(chan bool, 16)
	stop := Reload(time.Millisecond, func(forced bool) {
		select {
		case looks <- forced:
		default: // the test has seen enough
		}
	})
	if forced := <-looks; forced {
		t.Fatal("a tick looked forced")
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for forced := false; !forced; {
		select {
		case forced = <-looks:
		case <-deadline:
			t.Fatal("SIGHUP did not look forced")
		}
	}
	stop()
	stop()
}
