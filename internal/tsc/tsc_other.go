//go:build !amd64

package tsc

import "github.com/smoothrate/ratelimit/internal/prefetch"

// Read returns 0: only amd64 reads the counter (Usable is false).
func Read() uint64 { return 0 }

// ReadOrdered returns 0: only amd64 reads the counter.
func ReadOrdered() uint64 { return 0 }

var arch = false

// ReadPrefetching starts loading the lines, as internal/prefetch's Lines
// does, and returns 0.
func ReadPrefetching(addr, addr2, waddr uintptr) uint64 {
	prefetch.Lines(addr, addr2, waddr)
	return 0
}
