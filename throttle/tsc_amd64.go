package throttle

// rdtsc reads the processor's time-stamp counter, without the fence the
// vDSO's clock puts before it (see tsc.go).
func rdtsc() uint64

const tscArch = true
