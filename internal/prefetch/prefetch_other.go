//go:build !amd64 && !arm64

package prefetch

// Line does nothing here: this architecture has no prefetch in this
// package.
func Line(addr uintptr) {}

// Lines does nothing here either.
func Lines(addr, addr2, waddr uintptr) {}
