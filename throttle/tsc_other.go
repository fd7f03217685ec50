//go:build !amd64

package throttle

func rdtsc() uint64 { return 0 }

const tscArch = false
