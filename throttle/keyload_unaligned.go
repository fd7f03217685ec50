//go:build amd64 || arm64 || 386 || ppc64le

package throttle

import "unsafe"

// load64 reads the little-endian word at p: one load, where the processor
// is little-endian and loads words at any address (the Go runtime's hash
// reads keys the same way on these). Written as a load, not as
// load64's portable eight bytes (keyload_other.go), it is cheap enough
// for the compiler to inline shortKeyOf into find.
func load64(p unsafe.Pointer) uint64 { return *(*uint64)(p) }

// load32 reads the little-endian 32-bit word at p.
func load32(p unsafe.Pointer) uint64 { return uint64(*(*uint32)(p)) }
