package tsc

// Read returns the processor's time-stamp counter, without a fence: the
// processor may read it before the instructions that precede it complete.
func Read() uint64

// ReadOrdered returns the counter once every instruction before it has
// executed and every load before it is globally visible (rdtscp, as the
// kernel's vDSO reads it where the processor has it; Usable requires it).
func ReadOrdered() uint64

func hasRDTSCP() bool

var arch = hasRDTSCP()

// ReadPrefetching is Read, after it has started loading the lines that
// hold addr and addr2 and, for a write, the line that holds waddr, as
// internal/prefetch's Lines does: one call for the four, for the hot path
// that reads the clock as soon as it knows where its state is (a Go call
// spills every value the caller keeps in a register, and this one saves
// one).
//
//go:noescape
func ReadPrefetching(addr, addr2, waddr uintptr) uint64
