//go:build race

package main

// raceBuild: these tests run with the race detector, so buildBinary
// builds the command with it too: the dependencies compiled for the tests
// serve the binary (no second compile of gRPC and Envoy's protos), and the
// binary's own goroutines are checked for races as the tests drive it.
const raceBuild = true
