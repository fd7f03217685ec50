//go:build race

package docstest

// raceBuild: the tests run with the race detector.
const raceBuild = true
