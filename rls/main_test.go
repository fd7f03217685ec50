package rls

import (
	"os"
	"testing"
	"time"
)

// TestMain gives the tests' calls a store timeout that a loaded machine
// meets; the tests of the timeout itself set theirs.
func TestMain(m *testing.M) {
	defaultStoreTimeout = 10 * time.Second
	os.Exit(m.Run())
}
