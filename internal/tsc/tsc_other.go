//go:build !amd64

package tsc

// Read returns 0: only amd64 reads the counter (Usable is false).
func Read() uint64 { return 0 }

// ReadOrdered returns 0: only amd64 reads the counter.
func ReadOrdered() uint64 { return 0 }

var arch = false
