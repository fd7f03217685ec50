// Package tsc reads time from the processor's time-stamp counter, for the
// three hot paths that read the clock on every call: the root Limiter's
// grants, the distributed Limiter's grants from its leased pool (both
// through a Stopwatch), and the throttle MemoryStore's decisions.
//
// Go's clock reads CLOCK_MONOTONIC through the vDSO: where the kernel's
// clocksource is "tsc", this counter, scaled, read after an lfence (or with
// rdtscp) that waits for every instruction before it to complete, and
// through a switch to the system stack; where it is another (kvm-clock, on
// most KVM guests), the hypervisor's page of scales around the same
// counter, dearer still. Read here returns the counter without the fence:
// it may be read a little before the memory references that precede it in
// the program. ReadOrdered puts the fence back (rdtscp), for the readings
// whose order matters. The fence and the vDSO are most of the cost: on the
// machine of docs/performance.md, BenchmarkClock reads Now in about a third
// of the time of NowOrdered or time.Since.
//
// Now scales the counter into nanoseconds since the process started: it
// extrapolates from a reading of the monotonic clock (an Anchor), by the
// rate the two were seen to run at over the interval between the last two
// anchors, and anchors again every second, of the counter or of the
// monotonic clock, whichever ends first (Expired). Each new anchor checks the
// counter against the monotonic clock; if the two disagree by more than
// MaxError over an interval, the counter is given up for good and Now
// reads time.Since instead. It is used only where the counter is
// invariant (Usable), and never where time is fake (a testing/synctest
// bubble freezes time.Now; the counter would not stop with it: FakeTime).
package tsc

import (
	"bufio"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Usable reports whether this process may scale the counter into time:
// Linux on amd64 with rdtscp, and an invariant counter. It is checked once
// per process.
var Usable = sync.OnceValue(func() bool {
	if !arch || runtime.GOOS != "linux" {
		return false
	}
	current, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return invariant(string(current), cpuFlags())
})

// invariant reports whether the counter runs at one rate on every
// processor, through every sleep state, as the monotonic clock does: the
// kernel's clocksource is the counter ("tsc"), or the processor says so
// (the flags constant_tsc and nonstop_tsc of /proc/cpuinfo, CPUID's
// invariant TSC bit, as Rust's quanta and TiKV's minstant decide). The
// second covers a virtual machine whose kernel keeps to the hypervisor's
// clock (kvm-clock, on most KVM guests) over a counter that is just as
// good. Either way each anchor checks the counter against the monotonic
// clock and gives it up when the two disagree (Next).
func invariant(current, flags string) bool {
	if strings.TrimSpace(current) == "tsc" {
		return true
	}
	f := strings.Fields(flags)
	return slices.Contains(f, "constant_tsc") && slices.Contains(f, "nonstop_tsc")
}

// cpuFlags returns the flags of the first processor in /proc/cpuinfo
// (every processor of a machine has the same), or "".
func cpuFlags() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(name) == "flags" {
			return value
		}
	}
	return ""
}

// FakeTime reports whether time.Now is frozen, as it is inside a
// testing/synctest bubble (time moves there only when every goroutine of
// the bubble is blocked). Two readings of a real clock whose source is the
// counter are never equal: each takes some nanoseconds, and the clock
// counts them.
func FakeTime() bool {
	t1 := time.Now()
	t2 := time.Now()
	return !t2.After(t1)
}

const (
	// MinSpan is the shortest interval between two anchors that scales
	// the counter: shorter, the monotonic clock's granularity and the time
	// between its reading and the counter's would weigh too much.
	MinSpan = 100 * time.Millisecond
	// MaxError is how far the counter's measure of the interval between
	// two anchors may stray from the monotonic clock's before the counter
	// is given up.
	MaxError = time.Millisecond
	// Refresh is how long Now extrapolates from one anchor.
	Refresh = time.Second
	// ReorderSlack bounds how much earlier than the memory references
	// before it a reading by Read (Now) can be: the processor reads the
	// counter early only while an older instruction has not completed,
	// which a load holds up for at most a trip to memory (about 0.1 µs on
	// the machine of docs/performance.md, a few µs at worst with nested
	// page walks; an interrupt or a VM exit discards the early reading).
	// A decision that would be the same at any time up to ReorderSlack
	// later may rest on an unordered reading; any other reads the clock
	// again with NowOrdered.
	ReorderSlack = 10 * time.Microsecond
)

// An Anchor is a reading of a monotonic clock (Mono, in ns on any fixed
// origin) and of the counter at the same moment (TSC), with the scale
// learnt from the anchor before it.
type Anchor struct {
	Mono      int64
	TSC       uint64  // 0: the counter is not used
	NsPerTick float64 // 0: no scale yet
	MaxTicks  uint64  // the counter's ticks in refresh, the anchor's life (0: expired)
}

// Next returns the anchor of a new reading (mono, tsc) after prev, scaled
// by the interval between them, for a clock that re-anchors every refresh.
// ok is false when the counter disagreed with the monotonic clock over the
// interval by more than MaxError, or did not move while the monotonic clock
// moved MinSpan (the counter is then unfit: a migration between processors
// whose counters differ, a virtual machine's counter stepped, or a monotonic
// clock that is not real). A first anchor (prev nil, or without a counter
// reading) has no scale; one after too short an interval keeps the
// previous scale (two goroutines anchored at once, in either order).
func Next(prev *Anchor, mono int64, tsc uint64, refresh time.Duration) (a Anchor, ok bool) {
	a = Anchor{Mono: mono, TSC: tsc}
	if prev == nil || prev.TSC == 0 {
		return a, true
	}
	span := mono - prev.Mono
	ticks := int64(tsc - prev.TSC) // negative when this reading is the earlier one
	if prev.NsPerTick > 0 {
		est := int64(float64(ticks) * prev.NsPerTick)
		if d := est - span; d > int64(MaxError) || d < -int64(MaxError) {
			return Anchor{Mono: mono}, false
		}
	}
	if span < int64(MinSpan) {
		a.NsPerTick, a.MaxTicks = prev.NsPerTick, prev.MaxTicks
		return a, true
	}
	if ticks <= 0 {
		return Anchor{Mono: mono}, false
	}
	a.NsPerTick = float64(span) / float64(ticks)
	a.MaxTicks = uint64(float64(refresh) / a.NsPerTick)
	return a, true
}
