//go:build amd64 || arm64

package prefetch

// Line starts loading the cache line that holds addr into the processor's
// caches, without waiting for it and without faulting.
//
//go:noescape
func Line(addr uintptr)

// LineForWrite is Line for a line the caller is about to write: it asks
// for the line in the state that allows a write (on x86 PREFETCHW), so
// that a line another processor wrote last moves here once, not once to
// be read and again to be written.
//
//go:noescape
func LineForWrite(addr uintptr)
