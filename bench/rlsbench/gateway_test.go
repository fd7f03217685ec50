package rlsbench

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/smoothrate/ratelimit/bench/distbench"
	"github.com/smoothrate/ratelimit/internal/cli/metrics/metricstest"
	"github.com/smoothrate/ratelimit/internal/xdstest"
)

var flushFlag = flag.Duration("rls.flush", time.Second, "the reference's STATS_FLUSH_INTERVAL in TestGatewayDifferential (Envoy Gateway leaves its default, 10s)")

// rateLimitSeries is the prefix of the per-rule series Envoy Gateway's
// dashboards read.
const rateLimitSeries = "ratelimit_service_rate_limit_"

// TestGatewayDifferential runs envoyproxy/ratelimit and `ratelimit rls` as
// Envoy Gateway runs the reference (GatewayEnv: no argument, the
// configuration over xDS with mutual TLS, gRPC over TLS, Redis as
// host:port, Prometheus), both subscribed to one go-control-plane ADS
// server (internal/xdstest) as node envoy-ratelimit, each with a
// redis-server of its own. Through three snapshots, the first, a changed
// one, and one that neither may load, it sends both the same random calls
// of Envoy Gateway's shape (gatewayPool, gatewayCombos, with
// per-descriptor hits_addend, 0 included) at the same instants, compares
// every field of every answer (Differential), and then every
// ratelimit_service_rate_limit_* series of their /metrics pages
// (metricstest.Diff), once the reference has flushed its stats:
//
//	cd bench && go test -count=1 -v -run TestGatewayDifferential ./rlsbench/
//	cd bench && go test -count=1 -v -run TestGatewayDifferential ./rlsbench/ -args -rls.batches 30 -rls.seed 7
//	cd bench && go test -count=1 -v -run TestGatewayDifferential ./rlsbench/ -args -rls.ours ref   # the harness against itself
func TestGatewayDifferential(t *testing.T) {
	ref, ours := binaries(t)
	if *oursFlag == "ref" {
		ours = ref
	}
	bench, _, err := Dirs()
	if err != nil {
		t.Fatal(err)
	}
	mapping, err := ReferenceMapping(bench)
	if err != nil {
		t.Fatal(err)
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)

	certs, err := MakeCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	xds := xdstest.Start(t, xdstest.ServerTLS(t, certs.CA, certs.Leaf))
	// Every request of both streams, drained so that the server never
	// waits for the test; the NACKs counted by message.
	var mu sync.Mutex
	nacks := map[string]int{}
	go func() {
		for r := range xds.Requests {
			if r.GetErrorDetail() != nil {
				mu.Lock()
				nacks[r.GetErrorDetail().GetMessage()]++
				mu.Unlock()
			}
		}
	}()
	xds.Set(1, gatewaySnapshot1()...)

	start := func(startFn func(string, Gateway) (*Server, error), bin string, args, env []string) *Server {
		r, err := distbench.StartServer()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)
		s, err := startFn(bin, Gateway{Certs: certs, XDS: xds.Addr, Redis: r.Addr, MapperYAML: mapping,
			Env: append([]string{"STATS_FLUSH_INTERVAL=" + flushFlag.String()}, env...), Args: args})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s
	}
	g := &gatewayRun{t: t, ref: start(StartGatewayReference, ref, nil, nil)}
	var oursEnv, oursArgs []string
	if *envFlag != "" {
		oursEnv = strings.Split(*envFlag, ",")
	}
	if *argsFlag != "" {
		oursArgs = strings.Split(*argsFlag, ",")
	}
	if *oursFlag == "ref" {
		g.ours = start(StartGatewayReference, ours, nil, oursEnv)
		g.ours.Name = "reference#2"
	} else {
		g.ours = start(StartGatewayOurs, ours, oursArgs, oursEnv)
	}
	g.gen = &Gen{Rand: rand.New(rand.NewPCG(seed, 100)), Pool: gatewayPool, Combos: gatewayCombos, ComboAddends: true,
		Domains: []string{gwHTTP, gwGRPC, gwTCP}, DescriptorAddend: true, DescriptorAddendEvery: 3,
		DescriptorAddends: []uint64{0, 0, 1, 2, 5}}

	g.awaitLimit(5)
	g.flushed()
	if d := metricstest.Diff(g.refBase, g.oursBase, rateLimitSeries); len(d) > 0 {
		t.Errorf("before any call, the pages differ:\n%s", strings.Join(d, "\n"))
	}
	g.phase("snapshot 1")

	xds.Set(2, gatewaySnapshot2()...)
	g.awaitLimit(8)
	g.phase("snapshot 2 (changed)")

	xds.Set(3, gatewaySnapshotInvalid()...)
	g.awaitRefused()
	g.awaitLimit(8) // the second keeps serving
	g.phase("snapshot 3 (invalid: refused, the second serving on)")
	// The reference loads the invalid snapshot again each time the cache
	// sends it back after a NACK, as fast as it can; ours only after its
	// backoff, without counting it again.
	mu.Lock()
	defer mu.Unlock()
	t.Logf("NACKs received by the xDS server, by message: %v", nacks)
	if len(nacks) == 0 {
		t.Error("the invalid snapshot was refused without a NACK")
	}
}

// gatewayRun is one run of TestGatewayDifferential: the two servers, the
// calls, and their pages at the start of the current phase.
type gatewayRun struct {
	t                 *testing.T
	ref, ours         *Server
	gen               *Gen
	refBase, oursBase metricstest.Page
	// void: an attempt's series were not compared, so the pages as a
	// whole no longer need agree.
	void bool
}

// bound is how long a wait may take: some flushes of the reference's stats
// and the time a loaded machine takes to run them.
func (g *gatewayRun) bound() time.Duration { return 3**flushFlag + 20*time.Second }

// probe asks about gwA0 without counting it (hits_addend 0): its
// current_limit tells which snapshot the server applies.
func probe(ctx context.Context, s *Server) (uint32, error) {
	d := &rlsv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(0)}
	for _, e := range gwA0 {
		d.Entries = append(d.Entries, &rlsv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	resp, err := s.Client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: gwHTTP, Descriptors: []*rlsv3.RateLimitDescriptor{d}})
	if err != nil {
		return 0, err
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), nil
}

// awaitLimit waits until both servers decide gwA0 with want per second.
func (g *gatewayRun) awaitLimit(want uint32) {
	g.t.Helper()
	for _, s := range []*Server{g.ref, g.ours} {
		var got uint32
		var err error
		deadline := time.Now().Add(g.bound())
		for time.Now().Before(deadline) {
			if got, err = probe(g.t.Context(), s); err == nil && got == want {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling a child process: nothing to wait on
		}
		if err != nil || got != want {
			g.t.Fatalf("%s never applied the snapshot with %d a second: last answer %d, %v\n%s", s.Name, want, got, err, s.Log())
		}
	}
}

// counter is the value of a series of the page (0 when absent).
func counter(p metricstest.Page, series string) float64 {
	return p.Series("ratelimit_service_")[series]
}

const totalRequests = `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`

// scrape gets a server's page, failing the test on error.
func (g *gatewayRun) scrape(s *Server) metricstest.Page {
	g.t.Helper()
	p, body, err := metricstest.Scrape("http://" + s.Metrics + "/metrics")
	if err != nil {
		g.t.Fatalf("%s: %v\n%s", s.Name, err, body)
	}
	return p
}

// flushed waits until each page counts every call sent (total_requests
// is the number of calls: ours counts at once, the reference once it has
// flushed its stats), then until the pages' rate limit series counted
// since the base agree or a little more than a flush has passed (the
// reference's exporter takes the stats of a flush in turn, after it), and
// keeps the pages as the next phase's base.
func (g *gatewayRun) flushed() (refPage, oursPage metricstest.Page) {
	g.t.Helper()
	deadline := time.Now().Add(g.bound())
	for _, s := range []*Server{g.ref, g.ours} {
		want := float64(s.Calls())
		var got float64
		for {
			p := g.scrape(s)
			if got = counter(p, totalRequests); got == want {
				break
			}
			if got > want || time.Now().After(deadline) {
				g.t.Fatalf("%s: %s is %v, want %v (the calls sent)", s.Name, totalRequests, got, want)
			}
			time.Sleep(50 * time.Millisecond) // polling a child process's page
		}
	}
	deadline = time.Now().Add(2**flushFlag + 5*time.Second)
	for {
		refPage, oursPage = g.scrape(g.ref), g.scrape(g.ours)
		if len(metricstest.Diff(sub(refPage, g.refBase), sub(oursPage, g.oursBase), rateLimitSeries)) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.refBase, g.oursBase = refPage, oursPage
	return refPage, oursPage
}

// awaitRefused waits until both count a configuration refused.
func (g *gatewayRun) awaitRefused() {
	g.t.Helper()
	deadline := time.Now().Add(g.bound())
	for _, s := range []*Server{g.ref, g.ours} {
		for counter(g.scrape(s), "ratelimit_service_config_load_error") == 0 {
			if time.Now().After(deadline) {
				g.t.Fatalf("%s never counted the invalid snapshot refused\n%s", s.Name, s.Log())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// phase sends -rls.batches batches of calls to both and compares every
// answer, then the rate limit series counted meanwhile. A call that
// straddled a second or that ours answered UNAVAILABLE (its store slower
// than --store-timeout on a loaded machine: -rls.ours-args
// --store-timeout=1s avoids it) was answered, and counted, in ways that
// need not agree: the phase's series are then not compared, and one batch
// more is sent and compared, up to four times.
func (g *gatewayRun) phase(name string) {
	t := g.t
	t.Helper()
	const attempts = 5
	for attempt := 1; ; attempt++ {
		batches := *batchesFlag
		if attempt > 1 {
			batches = 1 // the shorter, the likelier to be compared
		}
		d := &Differential{Ref: g.ref, Others: []*Server{g.ours}, Batches: batches, Calls: *callsFlag, Log: testWriter{t}, Gen: g.gen}
		refBase, oursBase := g.refBase, g.oursBase
		rep, err := d.Run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s, attempt %d: %s", name, attempt, rep.Summary())
		for i, m := range rep.Mismatches {
			if i == *showFlag {
				t.Logf("... %d more", len(rep.Mismatches)-i)
				break
			}
			t.Log(m)
		}
		if len(rep.Mismatches) > 0 {
			t.Errorf("%s: %d of %d calls answered differently", name, len(rep.Mismatches), rep.Compared)
		}
		if rep.Compared == 0 {
			t.Errorf("%s: no call compared", name)
		}
		refPage, oursPage := g.flushed()
		if rep.Straddled == 0 && len(rep.Unavailable) == 0 {
			dr, do := sub(refPage, refBase), sub(oursPage, oursBase)
			if diffs := metricstest.Diff(dr, do, rateLimitSeries); len(diffs) > 0 {
				t.Errorf("%s: the %s* series counted differently (ours against the reference):\n%s", name, rateLimitSeries, strings.Join(diffs, "\n"))
			} else if diffs := metricstest.Diff(refPage, oursPage, rateLimitSeries); len(diffs) > 0 && !g.void {
				t.Errorf("%s: the pages' %s* series differ (ours against the reference):\n%s", name, rateLimitSeries, strings.Join(diffs, "\n"))
			}
			t.Logf("%s: %d %s* series counted, by the reference: %s", name, len(dr.Series(rateLimitSeries)), rateLimitSeries, seriesSummary(dr))
			return
		}
		if attempt == attempts {
			t.Errorf("%s: series not compared: every attempt had calls that straddled a second or were unavailable", name)
			return
		}
		g.void = true
		t.Logf("%s: series not compared (%d calls straddled a second, unavailable: %v); one batch more", name, rep.Straddled, rep.Unavailable)
	}
}

// sub is after's counters less before's, series by series: a series only
// in after keeps its value, one only in before gets minus its value (a
// page that drops a series shows it), and one that did not change is left
// out.
func sub(after, before metricstest.Page) metricstest.Page {
	out := metricstest.Page{}
	for name, f := range after {
		out[name] = proto.Clone(f).(*dto.MetricFamily)
	}
	for name, bf := range before {
		if bf.GetType() != dto.MetricType_COUNTER {
			continue
		}
		f, ok := out[name]
		if !ok {
			f = &dto.MetricFamily{Name: bf.Name, Help: bf.Help, Type: bf.Type}
			out[name] = f
		}
		for _, bm := range bf.GetMetric() {
			i := slices.IndexFunc(f.Metric, func(m *dto.Metric) bool { return sameLabels(m.GetLabel(), bm.GetLabel()) })
			switch {
			case i < 0:
				f.Metric = append(f.Metric, &dto.Metric{Label: bm.Label, Counter: &dto.Counter{Value: proto.Float64(-bm.GetCounter().GetValue())}})
			case f.Metric[i].GetCounter().GetValue() == bm.GetCounter().GetValue():
				f.Metric = slices.Delete(f.Metric, i, i+1)
			default:
				f.Metric[i].Counter.Value = proto.Float64(f.Metric[i].GetCounter().GetValue() - bm.GetCounter().GetValue())
			}
		}
		if len(f.Metric) == 0 {
			delete(out, name)
		}
	}
	return out
}

func sameLabels(a, b []*dto.LabelPair) bool {
	return slices.EqualFunc(a, b, func(x, y *dto.LabelPair) bool { return x.GetName() == y.GetName() && x.GetValue() == y.GetValue() })
}

// seriesSummary is a page's rate limit counts by family, summed: how much
// the phase exercised.
func seriesSummary(p metricstest.Page) string {
	sums := map[string]float64{}
	for k, v := range p.Series(rateLimitSeries) {
		name, _, _ := strings.Cut(k, "{")
		sums[strings.TrimPrefix(name, rateLimitSeries)] += v
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		parts = append(parts, fmt.Sprintf("%s %v", k, sums[k]))
	}
	return strings.Join(parts, ", ")
}

// TestSub checks the difference of two pages that phase compares.
func TestSub(t *testing.T) {
	page := func(text string) metricstest.Page {
		p, err := metricstest.Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := page("# TYPE c counter\nc{k=\"same\"} 3\nc{k=\"grew\"} 1\nc{k=\"dropped\"} 2\n# TYPE gone counter\ngone 4\n")
	after := page("# TYPE c counter\nc{k=\"same\"} 3\nc{k=\"grew\"} 5\nc{k=\"new\"} 0\n")
	got := sub(after, before).Series("")
	want := map[string]float64{`c{k="grew"}`: 4, `c{k="new"}`: 0, `c{k="dropped"}`: -2, "gone": -4}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
