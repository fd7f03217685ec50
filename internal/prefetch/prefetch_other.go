//go:build !amd64 && !arm64

package prefetch

// Line does nothing here: this architecture has no prefetch in this
// package.
func Line(addr uintptr) {}

// LineForWrite does nothing here either.
func LineForWrite(addr uintptr) {}
