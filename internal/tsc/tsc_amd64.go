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
