package rlqs

// Envoys sharing one bucket of one `ratelimit rlqs`: unequal demands, an
// Envoy leaving and another joining, the server restarted under them.

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/rlqstest"
	"github.com/smoothrate/ratelimit/internal/testlong"
)

// TestRLQSUnequalDemands: four Envoys wanting 10, 30, 60 and 90 a second
// of one bucket's 100 get their max-min shares of it (99 %: the server
// keeps 1 % unassigned), 10, 30, 29.5 and 29.5. Over 20 s (the long
// size) the fleet admits 100/s within 5 % and each Envoy its share within
// 10 %, capacities included; over 4 s (everyday), within 8 % and 15 %
// beyond what the token buckets' capacities allow, and what the server
// assigns within 5 % (stalledTol says why what they admit may fall
// further short).
func TestRLQSUnequalDemands(t *testing.T) {
	t.Parallel()
	window := testlong.Pick(4*time.Second, 20*time.Second)
	fleetTol, eachTol := testlong.Pick(0.08, 0.05), testlong.Pick(0.15, 0.10)
	p := startRLQS(t, "--config", writeConfig(t, 100))
	f := newEnvoys(t)
	demands := []float64{10, 30, 60, 90}
	shares := []float64{10, 30, 29.5, 29.5}
	for _, d := range demands {
		f.drive(f.add(p.grpcAddr, rlqstest.Config{}), api, d)
	}
	// An Envoy that gets all it wants may run up to 25 % above it.
	took := eventually(t, waitLimit, func() string { return fmt.Sprintf("rates %.2f, shares %.2f", rates(f.all, api), shares) },
		func() bool { return runningNear(f.all, api, shares, 0.95, 1.3) })
	t.Logf("settled after %v", took)
	w := measure(f.all, api, window)
	if testlong.Enabled() {
		// Over 20 s the bounds hold with the token buckets' capacities
		// inside them.
		w = w.strict()
	}
	within(t, "each Envoy", w, shares, eachTol)
	within(t, "the fleet", w.fleet(), []float64{100}, fleetTol)
	assert.True(t, runningNear(f.all, api, shares, 0.95, 1.3), "assigned after the window: %.2f", rates(f.all, api))
}

// TestRLQSLeaveAndJoin: three Envoys that each want more than a third of
// 90/s get 29.7 each; one closes its stream, and its share goes to the
// other two once its last assignment would have expired (the default time
// to live, 3 s, and the settle time); a fourth joins and the three get
// 29.7 again, within three reporting intervals. What they admit follows.
func TestRLQSLeaveAndJoin(t *testing.T) {
	t.Parallel()
	window := testlong.Pick(2*time.Second, 5*time.Second)
	const tol = 0.1
	p := startRLQS(t, "--config", writeConfig(t, 90))
	f := newEnvoys(t)
	a, b, c := f.add(p.grpcAddr, rlqstest.Config{}), f.add(p.grpcAddr, rlqstest.Config{}), f.add(p.grpcAddr, rlqstest.Config{})
	for _, e := range []*rlqstest.Envoy{a, b, c} {
		f.drive(e, api, 100)
	}
	three := []float64{29.7, 29.7, 29.7}
	settle := func(what string, es []*rlqstest.Envoy, want []float64, limit time.Duration) {
		t.Helper()
		took := eventually(t, limit, func() string { return fmt.Sprintf("%s: rates %.2f, want %.2f", what, rates(es, api), want) },
			func() bool { return runningNear(es, api, want, 0.97, 1.03) })
		t.Logf("%s: settled after %v", what, took)
		within(t, what, measure(es, api, window), want, tol)
	}
	settle("three", []*rlqstest.Envoy{a, b, c}, three, waitLimit)

	c.Close()
	// Its assignment expires 3 s (the TTL) after its last renewal, at most
	// a reporting interval ago, plus the settle time; 2 s of slack.
	settle("after one left", []*rlqstest.Envoy{a, b}, []float64{44.55, 44.55}, 5200*time.Millisecond)

	d := f.add(p.grpcAddr, rlqstest.Config{})
	f.drive(d, api, 100)
	// Three reporting intervals, and 1 s of slack for a busy machine.
	settle("after one joined", []*rlqstest.Envoy{a, b, d}, three, 4*time.Second)
}

// TestRLQSServerRestart: SIGTERM makes the server send every Envoy its
// assignment with a time to live of 0, so that each falls back at once to
// its expired-assignment behaviour (here 5/s), and exit 0; a server
// restarted on the same address rebuilds the shares from the Envoys' next
// reports.
func TestRLQSServerRestart(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, 100)
	p := startRLQS(t, "--config", path)
	f := newEnvoys(t)
	fallback := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: 5, TokensPerFill: wrapperspb.UInt32(5), FillInterval: durationpb.New(time.Second)}}}
	cfg := rlqstest.Config{Expired: fallback, ExpiredTimeout: time.Minute}
	es := []*rlqstest.Envoy{f.add(p.grpcAddr, cfg), f.add(p.grpcAddr, cfg)}
	for _, e := range es {
		f.drive(e, api, 100)
	}
	shares := []float64{49.5, 49.5}
	eventually(t, waitLimit, func() string { return fmt.Sprintf("rates %.2f", rates(es, api)) },
		func() bool { return runningNear(es, api, shares, 0.97, 1.03) })

	stopped := time.Now()
	p.Signal(t, syscall.SIGTERM)
	for i, e := range es {
		took := eventually(t, waitLimit, func() string { return fmt.Sprintf("Envoy %d: %+v, %+v", i, e.State(api), e.Totals(api)) },
			func() bool { st := e.State(api); return st.Fallback && st.Rate == 5 })
		assert.Equal(t, 1, e.Totals(api).ZeroTTL, "Envoy %d: a time to live of 0", i)
		// Not the expiry of the last renewal (the TTL, 3 s): the TTL-0
		// assignment, sent at once.
		assert.Less(t, took, 2*time.Second, "Envoy %d fell back after %v", i, took)
	}
	t.Logf("fell back %v after SIGTERM", time.Since(stopped))
	require.Equal(t, command.ExitOK, p.Wait(t, waitLimit), p.Stderr.String())
	assert.Contains(t, p.Stderr.String(), "shutting down")
	within(t, "while no server runs", measure(es, api, 2*time.Second), []float64{5, 5}, 0.2)

	q := &proc{Proc: clitest.Start(t, clitest.Binary(t), nil, waitLimit, "rlqs", "--config", path,
		"--grpc", p.grpcAddr, "--http", "127.0.0.1:0"), t: t}
	took := eventually(t, waitLimit, func() string { return fmt.Sprintf("rates %.2f; stderr: %s", rates(es, api), q.Stderr.String()) },
		func() bool { return runningNear(es, api, shares, 0.97, 1.03) })
	t.Logf("restarted server: shares back after %v", took)
	assert.Equal(t, 1, es[0].Totals(api).ZeroTTL)
	assert.GreaterOrEqual(t, es[0].Streams(), 2, "a new stream to the new server")
	assert.Equal(t, command.ExitOK, q.stop(), q.Stderr.String())
}
