//go:build race

package clitest

// raceBuild: the tests run with the race detector, so Binary builds the
// command with it too (see the package doc).
const raceBuild = true
