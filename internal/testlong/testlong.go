// Package testlong is how a test chooses between its everyday size and its
// long size. scripts/test (the README's test command) runs every test at a
// size that keeps the whole suite within a few minutes on a 2-core machine;
// scripts/test-more sets RATELIMIT_LONG_TESTS=1 and runs the same tests
// again with their long random walks, floods and seed counts. No test is
// left out either way: only how much of a random walk it takes changes.
package testlong

import "os"

// Env is the environment variable that asks for the long sizes.
const Env = "RATELIMIT_LONG_TESTS"

// Enabled reports whether the long sizes were asked for
// (RATELIMIT_LONG_TESTS set to anything but "" or "0").
func Enabled() bool {
	v := os.Getenv(Env)
	return v != "" && v != "0"
}

// Pick returns long when the long sizes were asked for and everyday
// otherwise.
func Pick[T any](everyday, long T) T {
	if Enabled() {
		return long
	}
	return everyday
}
