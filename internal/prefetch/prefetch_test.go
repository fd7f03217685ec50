package prefetch

import (
	"testing"
	"unsafe"
)

// TestLineNeverFaults prefetches addresses that a load would fault on:
// nil, the top of the address space, a line past the end of a slice.
// Line and Lines must stay hints, never a read or a write.
func TestLineNeverFaults(t *testing.T) {
	b := make([]byte, 64)
	for _, addr := range []uintptr{
		0,
		8,
		^uintptr(0) &^ 63,
		^uintptr(0) >> 1 &^ 63,
		uintptr(unsafe.Pointer(&b[0])),
	} {
		Line(addr)
		Lines(addr, addr, addr)
	}
}

func BenchmarkLine(b *testing.B) {
	buf := make([]byte, 1<<20)
	base := uintptr(unsafe.Pointer(&buf[0]))
	i := uintptr(0)
	for b.Loop() {
		Line(base + i&(1<<20-1))
		i += 4096 + 64
	}
}
