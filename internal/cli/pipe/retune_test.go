package pipe

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit"
)

// A chunk that waits for its turn when the rate changes is priced again at
// the new rate: only the chunk already written keeps the old price. Chunks
// of 1000 bytes at 1 kB/s: the first goes at 0 (the next one pays), the
// second waits until 1 s. While it waits, the rate goes to 1 MB/s: the second
// still goes at 1 s (the first's price), but the third at 1.001 s, not 2 s.
// Slowing down, the same the other way: the waiting chunk pays 1 s, not
// 1 ms.
func TestRetunePricesTheWaitingChunkAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		from, to      float64
		second, third time.Duration
	}{
		{"faster", 1e3, 1e6, time.Second, time.Second + time.Millisecond},
		{"slower", 1e6, 1e3, time.Millisecond, time.Millisecond + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim, err := ratelimit.NewBursty(tc.from, ratelimit.WithMaxBurstSeconds(0))
				require.NoError(t, err)
				r := &retunable{Acquirer: lim}
				start := time.Now()
				_, err = r.Acquire(t.Context(), 1000)
				require.NoError(t, err)
				second := make(chan time.Duration)
				go func() {
					_, err := r.Acquire(t.Context(), 1000)
					require.NoError(t, err)
					second <- time.Since(start)
				}()
				synctest.Wait() // the second chunk waits for its turn
				old, err := r.setRate(tc.to)
				require.NoError(t, err)
				require.Equal(t, tc.from, old)
				require.Equal(t, tc.second, <-second)
				_, err = r.Acquire(t.Context(), 1000)
				require.NoError(t, err)
				require.Equal(t, tc.third, time.Since(start))
			})
		})
	}
}
