//go:build race

package doccheck

// raceBuild: the tests run with the race detector.
const raceBuild = true
