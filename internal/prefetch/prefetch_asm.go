//go:build amd64 || arm64

package prefetch

// Line starts loading the cache line that holds addr into the processor's
// caches, without waiting for it and without faulting.
//
//go:noescape
func Line(addr uintptr)
