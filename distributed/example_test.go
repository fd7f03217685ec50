package distributed_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/distributed"
)

// Every process that runs this shares 100 requests per second with the
// others: the limit lives in Redis under the name "api". It needs a Redis
// server, so it is compiled but not run.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr: "localhost:6379",
		// Lets the limiter's call timeout bound the socket I/O too:
		// without it a call to a hung server lingers until ReadTimeout.
		ContextTimeoutEnabled: true,
	})
	defer client.Close()

	lim, err := distributed.New(client, "api", 100,
		// While Redis is away, run alone at 10/s rather than refuse.
		distributed.WithSafeRate(10),
		// Says once if the client lacks ContextTimeoutEnabled.
		distributed.WithLogger(slog.Default()),
	)
	if err != nil {
		log.Fatal(err)
	}
	// Close gives the permits this process leased but did not spend back
	// to the fleet, and leaves its fair-share registry at once.
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = lim.Close(ctx)
	}()

	for i := 0; i < 3; i++ {
		waited, err := lim.Acquire(context.Background(), 1)
		if errors.Is(err, distributed.ErrMisconfigured) {
			// A wrong password, database or cluster URL: not an
			// outage, and the limiter does not fail open on it.
			log.Fatal(err)
		}
		if err != nil {
			log.Print(err) // failing closed, or no share known yet
			continue
		}
		fmt.Println("request", i, "after", waited)
	}
}

// A Redis Cluster: any redis.UniversalClient will do. go-redis re-reads the
// slot map only on MOVED/ASK replies or once a minute; a dead primary sends
// neither, so a short ClusterStateReloadInterval makes a failover noticed
// in about a second instead of up to a minute.
func Example_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                      []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled:      true,
		ClusterStateReloadInterval: 250 * time.Millisecond,
	})
	defer client.Close()

	// The name becomes the keys' hash tag, so the limiter's keys share a
	// slot and its script runs on one node.
	lim, err := distributed.New(client, "uploads", 10e6, // 10 MB/s of bytes
		distributed.WithMaxBurstSeconds(0.1),
		distributed.WithCallTimeout(100*time.Millisecond),
		distributed.WithFailurePolicy(distributed.FailClosed),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())
	if lim.TryAcquire(64<<10, 0) {
		fmt.Println("sending 64 KiB now")
	}
}
