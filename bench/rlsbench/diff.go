package rlsbench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Differential sends the same random calls to the reference and to other
// servers at the same instants and compares every answer with Diff.
//
// Both sides read the wall clock of this machine, so a call sent to all
// of them between two readings of the clock in the same second is
// answered by all of them in that second (and minute, hour, ...). Each
// batch starts 50 ms into a second and stops sending at 900 ms; a call
// whose round straddles a second anyway is not compared, and since the
// servers may then have counted it in different windows, every store is
// emptied (FLUSHALL, or a restart of a memory store) before the next
// batch.
type Differential struct {
	Ref     *Server
	Others  []*Server
	Gen     *Gen
	Batches int // seconds of calls
	Calls   int // calls per batch
	// JSONEvery sends one call in JSONEvery through POST /json instead of
	// gRPC (0: never), comparing the HTTP status too.
	JSONEvery int
	Log       io.Writer
}

// CallMismatch is a call whose answers differ.
type CallMismatch struct {
	Batch, Call int
	Server      string
	Via         string // "grpc" or "json"
	Request     string
	Ref         string // the reference's answer
	Fields      []Mismatch
}

func (c CallMismatch) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "batch %d call %d (%s), %s:\n  request:   %s\n  reference: %s\n", c.Batch, c.Call, c.Via, c.Server, c.Request, c.Ref)
	for _, m := range c.Fields {
		fmt.Fprintf(&b, "  %s\n", m)
	}
	return b.String()
}

// Report is what a Differential found.
type Report struct {
	Compared  int // calls compared (per other server)
	Straddled int // calls not compared: their round straddled a second
	Servers   []string
	// Unavailable counts, per server, calls not compared because the
	// server answered UNAVAILABLE (or /json 503) where the reference
	// answered: ours gives
	// up on a store slower than --store-timeout (50 ms by default), which
	// a loaded machine can be. The stores are then emptied, as after a
	// straddle, since the call may or may not have been counted.
	Unavailable map[string]int
	// RefCodes counts the reference's statuses by code, and
	// RefOverall its overall codes: how much of the space was covered.
	RefCodes, RefOverall map[string]int
	Mismatches           []CallMismatch
	// ByField counts mismatching calls per server, way (grpc or json)
	// and field, e.g. "ours/memory grpc statuses[0].limit_remaining".
	ByField map[string]int
}

// Summary is one line per server and field, most frequent first.
func (r *Report) Summary() string {
	keys := slices.Collect(maps.Keys(r.ByField))
	slices.SortFunc(keys, func(a, b string) int {
		if d := r.ByField[b] - r.ByField[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%s against the reference: ", strings.Join(r.Servers, ", "))
	fmt.Fprintf(&b, "%d calls compared with each, %d answers differ, %d calls not compared (straddled a second)\n", r.Compared, len(r.Mismatches), r.Straddled)
	if len(r.Unavailable) > 0 {
		fmt.Fprintf(&b, "not compared, UNAVAILABLE where the reference answered: %v\n", r.Unavailable)
	}
	fmt.Fprintf(&b, "the reference answered: overall %v; statuses %v\n", r.RefOverall, r.RefCodes)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %5d  %s\n", r.ByField[k], k)
	}
	return b.String()
}

// Run runs the batches.
func (d *Differential) Run(ctx context.Context) (*Report, error) {
	rep := &Report{ByField: map[string]int{}, RefCodes: map[string]int{}, RefOverall: map[string]int{}, Unavailable: map[string]int{}}
	all := append([]*Server{d.Ref}, d.Others...)
	for _, s := range d.Others {
		rep.Servers = append(rep.Servers, s.Name)
	}
	for batch := range d.Batches {
		now := time.Now()
		start := now.Truncate(time.Second).Add(time.Second + 50*time.Millisecond)
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(time.Until(start)):
		}
		sec := start.Truncate(time.Second)
		d.Gen.NewBatch()
		for call := range d.Calls {
			if time.Since(sec) > 900*time.Millisecond {
				break
			}
			req := d.Gen.Call()
			answers := make([]*pb.RateLimitResponse, len(all))
			errs := make([]error, len(all))
			httpCodes := make([]int, len(all))
			via := "grpc"
			if d.JSONEvery > 0 && d.Gen.Rand.IntN(d.JSONEvery) == 0 {
				via = "json"
			}
			t0 := time.Now()
			for i, s := range all {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if via == "json" {
					answers[i], httpCodes[i], errs[i] = s.JSON(cctx, req)
				} else {
					answers[i], errs[i] = s.Client.ShouldRateLimit(cctx, req)
				}
				cancel()
			}
			t1 := time.Now()
			if !t0.Truncate(time.Second).Equal(sec) || !t1.Truncate(time.Second).Equal(sec) {
				rep.Straddled++
				if d.Log != nil {
					fmt.Fprintf(d.Log, "batch %d call %d straddled a second (%v): emptying the stores\n", batch, call, t1.Sub(t0))
				}
				if err := resetStores(ctx, all); err != nil {
					return rep, err
				}
				break
			}
			unavailable := false
			for i, s := range d.Others {
				if errs[0] == nil && (status.Code(errs[i+1]) == codes.Unavailable ||
					httpCodes[i+1] == http.StatusServiceUnavailable && httpCodes[0] != http.StatusServiceUnavailable) {
					rep.Unavailable[s.Name]++
					unavailable = true
					if d.Log != nil {
						fmt.Fprintf(d.Log, "batch %d call %d: %s answered %v: emptying the stores\n", batch, call, s.Name, errs[i+1])
					}
				}
			}
			if unavailable {
				if err := resetStores(ctx, all); err != nil {
					return rep, err
				}
				break
			}
			rep.Compared++
			switch {
			case errs[0] != nil:
				rep.RefOverall["error"]++
			case answers[0] == nil:
				rep.RefOverall[fmt.Sprintf("http %d", httpCodes[0])]++
			default:
				rep.RefOverall[answers[0].GetOverallCode().String()]++
				if len(answers[0].GetResponseHeadersToAdd()) > 0 {
					rep.RefOverall["with headers"]++
				}
				for _, st := range answers[0].GetStatuses() {
					k := st.GetCode().String()
					switch {
					case st.GetCurrentLimit() == nil:
						k += " (no limit)"
					case st.GetCode() == pb.RateLimitResponse_OK && st.GetLimitRemaining() == 0:
						k += " (0 left)"
					}
					rep.RefCodes[k]++
				}
			}
			for i, s := range d.Others {
				ms := Diff(answers[0], errs[0], answers[i+1], errs[i+1])
				if httpCodes[0] != httpCodes[i+1] {
					ms = append(ms, Mismatch{Field: "http_status", Ref: fmt.Sprint(httpCodes[0]), Got: fmt.Sprint(httpCodes[i+1])})
				}
				if len(ms) == 0 {
					continue
				}
				ref := "error " + fmt.Sprint(errs[0])
				if errs[0] == nil {
					ref = Text(answers[0])
				}
				rep.Mismatches = append(rep.Mismatches, CallMismatch{Batch: batch, Call: call, Server: s.Name, Via: via,
					Request: Text(req), Ref: ref, Fields: ms})
				seen := map[string]bool{}
				for _, m := range ms {
					k := s.Name + " " + via + " " + m.Field
					if !seen[k] {
						seen[k] = true
						rep.ByField[k]++
					}
				}
			}
		}
	}
	return rep, nil
}

// resetStores empties every Redis the servers use and restarts the
// servers on a memory store.
func resetStores(ctx context.Context, servers []*Server) error {
	flushed := map[string]bool{}
	for _, s := range servers {
		if s.Redis == "" {
			if err := s.Restart(); err != nil {
				return err
			}
			continue
		}
		if flushed[s.Redis] {
			continue
		}
		flushed[s.Redis] = true
		c := redis.NewClient(&redis.Options{Addr: s.Redis})
		err := c.FlushAll(ctx).Err()
		c.Close()
		if err != nil {
			return fmt.Errorf("FLUSHALL %s: %w", s.Redis, err)
		}
	}
	return nil
}
