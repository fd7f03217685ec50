//go:build !(amd64 || arm64 || 386 || ppc64le)

package throttle

import "unsafe"

// load64 reads the little-endian word at p, a byte at a time: this
// processor may not load a word from any address.
func load64(p unsafe.Pointer) uint64 {
	b := (*[8]byte)(p)
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// load32 reads the little-endian 32-bit word at p.
func load32(p unsafe.Pointer) uint64 {
	b := (*[4]byte)(p)
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
}
