package rlsbench

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
)

// PerfConfig is the load's configuration: one rule per descriptor of a
// call, both limits at perSecond per second and per minute (1e9: every
// call is admitted, the common case of a healthy service).
func PerfConfig(perSecond uint32) map[string]string {
	return map[string]string{"perf.yaml": fmt.Sprintf(`domain: perf
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: path
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: %d}
`, perSecond, perSecond)}
}

// PerfRequests returns n calls of two descriptors each, as an edge proxy
// sends them: the client's address (one of keys) and the path and method
// (one of 100 paths, GET or POST).
func PerfRequests(n, keys int, seed uint64) []*pb.RateLimitRequest {
	r := rand.New(rand.NewPCG(seed, 0))
	reqs := make([]*pb.RateLimitRequest, n)
	for i := range reqs {
		k := r.IntN(keys)
		method := "GET"
		if r.IntN(4) == 0 {
			method = "POST"
		}
		reqs[i] = &pb.RateLimitRequest{Domain: "perf", Descriptors: []*rlsv3.RateLimitDescriptor{
			{Entries: []*rlsv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprintf("10.%d.%d.%d", k>>16&255, k>>8&255, k&255)}}},
			{Entries: []*rlsv3.RateLimitDescriptor_Entry{{Key: "path", Value: fmt.Sprintf("/api/%d", r.IntN(100))}, {Key: "method", Value: method}}},
		}}
	}
	return reqs
}

// LoadResult is what Load measured.
type LoadResult struct {
	Calls     int // answered calls
	OverLimit int // of which OVER_LIMIT
	Errors    int
	FirstErr  error
	Elapsed   time.Duration
	P50, P99  time.Duration
}

// CallsPerSecond is answered calls per second of the run.
func (r LoadResult) CallsPerSecond() float64 { return float64(r.Calls) / r.Elapsed.Seconds() }

// Load has callers goroutines call ShouldRateLimit back to back, each
// walking reqs from its own offset, until d has passed, and measures each
// call's latency. A call under way at the end completes and counts, so
// that the server's work (its Redis commands) matches the calls counted.
func Load(ctx context.Context, c pb.RateLimitServiceClient, reqs []*pb.RateLimitRequest, callers int, d time.Duration) LoadResult {
	type part struct {
		lat        []time.Duration
		over, errs int
		firstErr   error
	}
	parts := make([]part, callers)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	// A server that stops answering must not hang the run.
	ctx, cancel := context.WithDeadline(ctx, end.Add(30*time.Second))
	defer cancel()
	for w := range callers {
		wg.Go(func() {
			p := &parts[w]
			p.lat = make([]time.Duration, 0, 1<<14)
			for i := w * len(reqs) / callers; ctx.Err() == nil; i++ {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				resp, err := c.ShouldRateLimit(ctx, reqs[i%len(reqs)])
				lat := time.Since(t0)
				if err != nil {
					p.errs++
					if p.firstErr == nil {
						p.firstErr = err
					}
					continue
				}
				p.lat = append(p.lat, lat)
				if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
					p.over++
				}
			}
		})
	}
	wg.Wait()
	res := LoadResult{Elapsed: time.Since(start)}
	var all []time.Duration
	for _, p := range parts {
		all = append(all, p.lat...)
		res.OverLimit += p.over
		res.Errors += p.errs
		if res.FirstErr == nil {
			res.FirstErr = p.firstErr
		}
	}
	res.Calls = len(all)
	if len(all) > 0 {
		slices.Sort(all)
		res.P50 = all[len(all)/2]
		res.P99 = all[min(len(all)-1, len(all)*99/100)]
	}
	return res
}

// CommandStats returns the calls per command of INFO commandstats
// ("incrby" → n), leaving out only what the measurement itself sends
// (INFO, CONFIG RESETSTAT, FLUSHALL): a server's PINGs and connection
// set-up count.
func CommandStats(ctx context.Context, addr string) (map[string]int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return ParseCommandStats(s), nil
}

// ParseCommandStats reads INFO commandstats.
func ParseCommandStats(info string) map[string]int64 {
	m := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if base, _, _ := strings.Cut(name, "|"); slices.Contains([]string{"info", "config", "flushall"}, base) {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					m[name] += n
				}
			}
		}
	}
	return m
}

// ResetRedis empties the server and zeroes its command statistics.
func ResetRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.FlushAll(ctx).Err(); err != nil {
		return err
	}
	return c.ConfigResetStat(ctx).Err()
}

// CountCommands runs fn with a MONITOR connection open on the server and
// returns the commands it executed meanwhile, by name: sent by clients,
// or called by a script (INFO commandstats counts both alike).
func CountCommands(ctx context.Context, addr string, fn func() error) (sent, scripted map[string]int, err error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		return nil, nil, err
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		return nil, nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	const marker = "rlsbench-monitor-end"
	sent, scripted = map[string]int{}, map[string]int{}
	done := make(chan error, 1)
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				done <- err
				return
			}
			src, cmd, ok := parseMonitor(line)
			if !ok {
				continue
			}
			if cmd == "echo" && strings.Contains(line, marker) {
				done <- nil
				return
			}
			if src == "lua" {
				scripted[cmd]++
			} else {
				sent[cmd]++
			}
		}
	}()
	ferr := fn()
	// RESP2 and no identity: the marker's client sends nothing but ECHO.
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	if err := c.Echo(ctx, marker).Err(); err != nil {
		return nil, nil, err
	}
	if err := <-done; err != nil {
		return nil, nil, err
	}
	// go-redis opens the marker's connection with HELLO, whatever the
	// protocol.
	if sent["hello"]--; sent["hello"] <= 0 {
		delete(sent, "hello")
	}
	return sent, scripted, ferr
}

// parseMonitor reads a MONITOR line:
// +1732550000.123456 [0 127.0.0.1:5555] "INCRBY" "key" "1"
// +1732550000.123456 [0 lua] "INCRBY" "key" "1"
func parseMonitor(line string) (src, cmd string, ok bool) {
	_, rest, ok := strings.Cut(line, "[")
	if !ok {
		return "", "", false
	}
	who, rest, ok := strings.Cut(rest, "] ")
	if !ok {
		return "", "", false
	}
	if _, s, ok := strings.Cut(who, " "); ok {
		src = s
	}
	rest = strings.TrimPrefix(rest, `"`)
	cmd, _, ok = strings.Cut(rest, `"`)
	return src, strings.ToLower(cmd), ok
}
