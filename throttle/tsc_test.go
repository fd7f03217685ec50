package throttle

import (
	"testing"
	"time"
)

// TestCalibrate: the counter's scale comes from the monotonic clock over
// the interval between two wall readings, survives an interval too short
// to measure, and is given up when the counter runs backwards or
// disagrees with the monotonic clock by more than tscMaxError.
func TestCalibrate(t *testing.T) {
	t0 := time.Now()
	const hz = 2_600_000_000 // ticks per second
	at := func(d time.Duration) (time.Time, int64, uint64) {
		return t0.Add(d), 1_000_000 + d.Microseconds(), uint64(1e9 + float64(hz)*d.Seconds())
	}
	cal := func(prev *wallAnchor, d time.Duration) (*wallAnchor, bool) {
		tm, us, tick := at(d)
		return calibrate(prev, tm, us, tick)
	}

	first, ok := cal(nil, 0)
	if !ok || first.usPerTick != 0 || first.tsc == 0 {
		t.Fatalf("first anchor: %+v, %v; want the counter read and no scale", first, ok)
	}
	second, ok := cal(first, 200*time.Millisecond)
	if want := 1e6 / hz; !ok || second.usPerTick < want*(1-1e-9) || second.usPerTick > want*(1+1e-9) {
		t.Fatalf("second anchor: %+v, %v; want %g µs per tick", second, ok, want)
	}
	if want := uint64(hz); second.maxTicks < want-2 || second.maxTicks > want+2 {
		t.Errorf("maxTicks = %d, want a second's %d", second.maxTicks, want)
	}
	short, ok := cal(second, 210*time.Millisecond)
	if !ok || short.usPerTick != second.usPerTick || short.maxTicks != second.maxTicks {
		t.Errorf("10 ms later: %+v, %v; want the previous scale kept", short, ok)
	}

	// The counter says 1 s and twice tscMaxError where the monotonic clock
	// says 1 s.
	tm, us, _ := at(1200 * time.Millisecond)
	_, _, tick := at(1200*time.Millisecond + 2*tscMaxError)
	if a, ok := calibrate(second, tm, us, tick); ok || a.tsc != 0 || a.usPerTick != 0 {
		t.Errorf("counter %v ahead: %+v, %v; want it given up", 2*tscMaxError, a, ok)
	}
	// Within tscMaxError it is kept and rescaled.
	_, _, tick = at(1200*time.Millisecond + tscMaxError/2)
	if a, ok := calibrate(second, tm, us, tick); !ok || a.usPerTick <= second.usPerTick*0.99 || a.usPerTick >= second.usPerTick {
		t.Errorf("counter 0.5 ms ahead: %+v, %v; want it kept, a little slower per tick", a, ok)
	}
	// Two goroutines read the wall clock at once, and the one that stores
	// its anchor second read a little earlier: nothing is learned, nothing
	// is given up, the scale holds.
	if a, ok := cal(second, 200*time.Millisecond-time.Microsecond); !ok || a.usPerTick != second.usPerTick || a.tsc == 0 {
		t.Errorf("a reading 1 µs before the anchor: %+v, %v; want the counter kept with the previous scale", a, ok)
	}
	// A counter that did not move while the monotonic clock moved 200 ms,
	// before any scale was known.
	tm2, us2, _ := at(200 * time.Millisecond)
	if a, ok := calibrate(first, tm2, us2, first.tsc); ok || a.tsc != 0 || a.usPerTick != 0 {
		t.Errorf("counter stopped: %+v, %v; want it given up", a, ok)
	}
	// Backwards, over a second.
	if a, ok := calibrate(second, tm, us, second.tsc-1); ok || a.tsc != 0 {
		t.Errorf("counter backwards: %+v, %v; want it given up", a, ok)
	}
}

// TestMemoryClockFollowsWall reads the default clock against the wall
// clock for 300 ms of real time (what is measured is time itself): every
// reading lies between the wall readings around it, within 1 ms, through
// the first anchor (monotonic) and, where the counter is usable, the
// scaled counter from tscMinSpan on.
func TestMemoryClockFollowsWall(t *testing.T) {
	s := NewMemoryStore()
	if s.tsc.Load() != tscUsable() {
		t.Fatalf("store uses the counter: %v; usable: %v", s.tsc.Load(), tscUsable())
	}
	const tol = 1000 // µs
	scaled := false
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		before := time.Now().UnixMicro()
		got, err := s.now()
		after := time.Now().UnixMicro()
		if err != nil || got < before-tol || got > after+tol {
			t.Fatalf("now() = %d, %v; wall clock read %d before and %d after", got, err, before, after)
		}
		if a := s.wall.Load(); a != nil && a.usPerTick > 0 {
			scaled = true
		}
	}
	if scaled != tscUsable() {
		t.Errorf("counter scaled: %v; usable: %v", scaled, tscUsable())
	}
	if tscUsable() && !s.tsc.Load() {
		t.Error("the counter was given up")
	}
}
