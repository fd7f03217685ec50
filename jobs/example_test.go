package jobs_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/jobs"
)

// Fetch four pages at 2 per second, one at a time. The fake clock makes the
// start times exact; with the default clock the same code really waits.
func ExampleRun() {
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(2, ratelimit.WithClock(clk))
	pages := []string{"/a", "/b", "/missing", "/d"}
	results, err := jobs.Run(context.Background(), lim, 1, pages, func(ctx context.Context, page string) error {
		fmt.Printf("%v fetch %s\n", clk.Elapsed(), page)
		if page == "/missing" {
			return errors.New("404")
		}
		return nil
	})
	if err != nil {
		fmt.Println("run:", err)
	}
	for _, r := range results {
		if r.Err != nil {
			fmt.Printf("%s failed: %v\n", r.Item, r.Err)
		}
	}
	// Output:
	// 0s fetch /a
	// 500ms fetch /b
	// 1s fetch /missing
	// 1.5s fetch /d
	// /missing failed: 404
}
