//go:build !race

package clitest

// raceBuild: see race_on.go.
const raceBuild = false
