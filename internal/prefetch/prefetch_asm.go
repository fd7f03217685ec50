//go:build amd64 || arm64

package prefetch

// Line starts loading the cache line that holds addr into the processor's
// caches, without waiting for it and without faulting.
//
//go:noescape
func Line(addr uintptr)

// Lines starts loading the lines that hold addr and addr2, as Line does,
// and the line that holds waddr for a write: in the state that allows one
// (on x86 PREFETCHW), so that a line another processor wrote last moves
// here once, not once to be read and again to be written. One call for
// all: the decision that uses it counts its instructions.
//
//go:noescape
func Lines(addr, addr2, waddr uintptr)
