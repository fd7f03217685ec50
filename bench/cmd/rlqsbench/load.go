package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// loadResult is what the simulated Envoys saw over a measurement.
type loadResult struct {
	reports  int64 // bucket usages sent
	messages int64 // report messages sent
	changed  int64 // assignments received that changed a bucket's token bucket
	// missed counts the reports not fully answered by the next one.
	missed        int64
	p50, p99, max time.Duration
}

// generator runs the simulated Envoys.
type generator struct {
	c     config
	conns []*grpc.ClientConn
	wg    sync.WaitGroup

	mu                                 sync.Mutex
	lat                                []time.Duration
	reports, messages, changed, missed int64
}

func newGenerator(ctx context.Context, addr string, c config) (*generator, error) {
	g := &generator{c: c}
	rng := rand.New(rand.NewPCG(1, 2))
	for range c.clients {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.close()
			return nil, err
		}
		g.conns = append(g.conns, conn)
		demands := make([]float64, c.buckets)
		for k := range demands {
			// Twice an equal share, times 0.5 to 1.5: contended.
			demands[k] = 2 * c.rate / float64(c.clients) * (0.5 + rng.Float64())
		}
		phase := time.Duration(rng.Int64N(int64(c.interval)))
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.client(ctx, conn, demands, phase)
		}()
	}
	return g, nil
}

// client is one Envoy: a stream, a report of every bucket each interval.
func (g *generator) client(ctx context.Context, conn *grpc.ClientConn, demands []float64, phase time.Duration) {
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		return
	}
	ids := make([]*rlqsv3.BucketId, len(demands))
	for k := range ids {
		ids[k] = &rlqsv3.BucketId{Bucket: map[string]string{"bucket": "b" + strconv.Itoa(k)}}
	}
	var mu sync.Mutex
	rates := make([]float64, len(demands)) // 0: no assignment (allow all)
	var sent time.Time
	remaining := 0
	answered := make([]bool, len(demands))

	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			now := time.Now()
			mu.Lock()
			for _, a := range r.GetBucketAction() {
				k, err := strconv.Atoi(strings.TrimPrefix(a.GetBucketId().GetBucket()["bucket"], "b"))
				if err != nil || k < 0 || k >= len(demands) {
					continue
				}
				if tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb != nil {
					rate := float64(tb.GetTokensPerFill().GetValue()) / float64(tb.GetFillInterval().GetSeconds())
					if rate != rates[k] {
						rates[k] = rate
						g.count(&g.changed, 1)
					}
				}
				if !answered[k] {
					answered[k] = true
					remaining--
					if remaining == 0 {
						g.latency(now.Sub(sent))
					}
				}
			}
			mu.Unlock()
		}
	}()

	select {
	case <-time.After(phase):
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(g.c.interval)
	defer t.Stop()
	last := time.Now()
	for {
		now := time.Now()
		el := now.Sub(last)
		last = now
		m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "bench"}
		mu.Lock()
		if remaining > 0 && !sent.IsZero() {
			g.count(&g.missed, 1)
		}
		for k, d := range demands {
			want := d * el.Seconds()
			allowed := want
			if rates[k] > 0 {
				allowed = min(want, rates[k]*el.Seconds())
			}
			m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId: ids[k], NumRequestsAllowed: uint64(allowed), NumRequestsDenied: uint64(want - allowed),
				TimeElapsed: &durationpb.Duration{Seconds: int64(el / time.Second)},
			})
			answered[k] = false
		}
		remaining, sent = len(demands), now
		mu.Unlock()
		if err := stream.Send(m); err != nil {
			return
		}
		g.count(&g.messages, 1)
		g.count(&g.reports, int64(len(demands)))
		select {
		case <-t.C:
		case <-ctx.Done():
			_ = stream.CloseSend()
			return
		}
	}
}

func (g *generator) count(x *int64, n int64) {
	g.mu.Lock()
	*x += n
	g.mu.Unlock()
}

func (g *generator) latency(d time.Duration) {
	g.mu.Lock()
	g.lat = append(g.lat, d)
	g.mu.Unlock()
}

// reset starts a measurement.
func (g *generator) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lat = g.lat[:0]
	g.reports, g.messages, g.changed, g.missed = 0, 0, 0, 0
}

// take ends a measurement.
func (g *generator) take() loadResult {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := loadResult{reports: g.reports, messages: g.messages, changed: g.changed, missed: g.missed}
	if len(g.lat) > 0 {
		lat := slices.Clone(g.lat)
		slices.Sort(lat)
		r.p50 = lat[len(lat)/2]
		r.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
		r.max = lat[len(lat)-1]
	}
	return r
}

func (g *generator) close() {
	for _, c := range g.conns {
		_ = c.Close()
	}
	g.wg.Wait()
}
