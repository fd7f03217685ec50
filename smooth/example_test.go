package smooth_test

import (
	"fmt"

	"github.com/smoothrate/ratelimit/smooth"
)

// The engine is a pure function of the times it is given: here ticks are
// milliseconds, and three requests arrive at once on a limiter of 2 permits
// per second. Each waits only for the debt of the ones before it ("the next
// caller pays"); after an idle spell the stored permits are free.
func Example() {
	const ms = 1e3                     // ticks per second: one tick is a millisecond
	e := smooth.NewBursty(ms, 1, 2, 0) // 2 permits/s, stores up to 1 s of them, at t=0
	for _, permits := range []int{1, 3, 1} {
		moment, _ := e.Reserve(permits, 0)
		fmt.Printf("%d permit(s) asked at 0 ms may go at %d ms\n", permits, moment)
	}
	// Idle until 5 s: the debt is paid off (at 2 s) and a full second's
	// worth of permits is stored: two go at once, free. The next finds
	// no debt and goes too, but its price makes the one after it wait.
	fmt.Printf("stored at 5000 ms: %.0f permits\n", e.StoredPermitsAt(5000))
	fmt.Println("wait at 5000 ms:", e.ReserveWait(2, 5000), "ms")
	fmt.Println("wait for the next:", e.ReserveWait(1, 5000), "ms")
	fmt.Println("and the one after:", e.ReserveWait(1, 5000), "ms")
	// Output:
	// 1 permit(s) asked at 0 ms may go at 0 ms
	// 3 permit(s) asked at 0 ms may go at 500 ms
	// 1 permit(s) asked at 0 ms may go at 2000 ms
	// stored at 5000 ms: 2 permits
	// wait at 5000 ms: 0 ms
	// wait for the next: 0 ms
	// and the one after: 500 ms
}
