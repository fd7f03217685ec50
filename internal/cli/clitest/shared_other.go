//go:build !unix

package clitest

// buildShared shares no build where there is no flock: each test process
// builds its own binary.
func buildShared(goTool, out string) (bool, error) { return false, nil }
