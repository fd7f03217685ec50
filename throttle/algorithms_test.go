package throttle

import (
	"math/rand/v2"
	"testing"

	"github.com/smoothrate/ratelimit/internal/testlong"
)

// TestQuo checks the float64 division against integer division where it
// is hardest: quotients just below an integer, the largest operands, and
// random ones over the whole range [0, 2^53).
func TestQuo(t *testing.T) {
	const top = maxExact - 1
	check := func(a, b int64) {
		t.Helper()
		if got, want := quo(a, b), a/b; got != want {
			t.Fatalf("quo(%d, %d) = %d, want %d", a, b, got, want)
		}
		if got, want := ceilDiv(a, b), (a+b-1)/b; got != want {
			t.Fatalf("ceilDiv(%d, %d) = %d, want %d", a, b, got, want)
		}
	}
	for _, b := range []int64{1, 2, 3, 7, 1_000_000, 86_400_000_000, 1<<52 + 1, top} {
		for _, a := range []int64{0, 1, b - 1, b, b + 1, top, top - 1, top - top%b, top - top%b - 1} {
			if a >= 0 && a <= top {
				check(a, b)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range testlong.Pick(250_000, 1_000_000) {
		b := 1 + r.Int64N(1<<uint(1+r.IntN(52)))
		q := r.Int64N(top/b + 1)
		for _, a := range []int64{q * b, q*b - 1, q*b + 1, q*b + b - 1} {
			if a >= 0 && a <= top {
				check(a, b)
			}
		}
	}
}
