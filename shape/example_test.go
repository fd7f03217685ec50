package shape_test

import (
	"fmt"
	"io"
	"strings"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/shape"
)

// printer reports every Write it gets, with the fake time.
type printer struct{ clk *clocktest.Fake }

func (p printer) Write(b []byte) (int, error) {
	fmt.Printf("%-6v %d bytes\n", p.clk.Elapsed(), len(b))
	return len(b), nil
}

// One io.Copy of 35 000 bytes through a 1 MB/s Writer leaves as 10 ms chunks
// of 10 000 bytes. The fake clock makes the schedule exact; with the default
// clock the same code really waits.
func ExampleNewWriter() {
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(1e6, ratelimit.WithClock(clk), ratelimit.WithMaxBurstSeconds(0.1))
	w, _ := shape.NewWriter(printer{clk}, lim)
	io.Copy(w, strings.NewReader(strings.Repeat("x", 35_000)))
	// Output:
	// 0s     10000 bytes
	// 10ms   10000 bytes
	// 20ms   10000 bytes
	// 30ms   5000 bytes
}

func ExampleParseRate() {
	for _, s := range []string{"500k", "1MiB/s", "2Gbit", "100Mbps", "10mb"} {
		r, err := shape.ParseRate(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-8s %.0f bytes/s = %s\n", s, r, shape.FormatRate(r))
	}
	// Output:
	// 500k     500000 bytes/s = 500 kB/s
	// 1MiB/s   1048576 bytes/s = 1.05 MB/s
	// 2Gbit    250000000 bytes/s = 250 MB/s
	// 100Mbps  12500000 bytes/s = 12.5 MB/s
	// shape: invalid size or rate: "10mb": lower-case m is ambiguous; write M for mega (units: k M G T P E = 1000ⁿ, Ki Mi Gi Ti Pi Ei = 1024ⁿ, B = bytes, b or bit = bits, optional /s)
}
