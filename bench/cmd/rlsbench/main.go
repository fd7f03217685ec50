// Command rlsbench measures `ratelimit rls` against envoyproxy/ratelimit
// (the reference) in the same run, on the same redis-server, under the
// same gRPC load: -c concurrent callers, two descriptors a call, for -d
// per subject and round. It prints, as Markdown, calls per second, p50
// and p99 latency, Redis commands per call (INFO commandstats), and the
// CPU time per call of the server and of redis-server, then the ratios
// ours/reference against the goals (Redis: at least 1.25× the calls per
// second with a p99 no worse; ours on the memory store: at least 2× the
// reference's on Redis):
//
//	cd bench && go run ./cmd/rlsbench -d 10s -rounds 3
//
// With -tls, every server serves gRPC over TLS (a certificate made for the
// run: the reference's GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT and
// _KEY, ours's --grpc-tls-cert and --grpc-tls-key) and the callers connect
// over TLS, as Envoy Gateway runs the service; the goals are the same:
//
//	cd bench && go run ./cmd/rlsbench -d 10s -rounds 3 -tls
//
// A quick check that it works (figures then mean nothing):
//
//	cd bench && go run ./cmd/rlsbench -d 300ms -warm 100ms
//
// Each round runs the subjects one after the other (reference, ours on
// Redis, ours on the memory store), each on a freshly started server and
// an emptied Redis, after -warm of the same load; the table holds the
// medians over rounds and the ratios of medians, with the range of the
// per-round ratios. Run it on an otherwise idle machine: the load
// generator, the servers and redis-server share its CPUs.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/smoothrate/ratelimit/bench/distbench"
	"github.com/smoothrate/ratelimit/bench/internal/report"
	"github.com/smoothrate/ratelimit/bench/rlsbench"
)

// round is one measurement of one subject.
type round struct {
	load      rlsbench.LoadResult
	cmds      map[string]int64
	serverCPU time.Duration
	redisCPU  time.Duration
	redisCmds int64
	// Commands per call of a sample of sequential calls under MONITOR:
	// sent by the server, and called by its scripts.
	sent, scripted map[string]float64
}

func main() {
	d := flag.Duration("d", 10*time.Second, "measured load per subject and round")
	warm := flag.Duration("warm", 2*time.Second, "load before each measurement (not measured)")
	rounds := flag.Int("rounds", 1, "rounds; the table shows medians")
	callers := flag.Int("c", 32, "concurrent callers")
	conns := flag.Int("conns", 4, "gRPC connections the callers share (Envoy holds one per worker)")
	keys := flag.Int("keys", 10000, "distinct client addresses in the calls")
	limit := flag.Uint("limit", 1_000_000_000, "requests_per_unit of both rules (the default admits every call)")
	subjects := flag.String("subjects", "reference,ours/redis,ours/memory", "what to measure")
	refBin := flag.String("ref", "", "the reference's binary (default: built from bench/envoyref)")
	ourBin := flag.String("ours", "", "our ratelimit binary (default: built from the working tree)")
	refEnv := flag.String("ref-env", "", "extra environment of the reference, comma-separated (e.g. REDIS_PIPELINE_WINDOW=150us)")
	oursEnv := flag.String("ours-env", "", "extra environment of ours, comma-separated")
	oursArgs := flag.String("ours-args", "", "extra flags of ours, comma-separated (e.g. --store-timeout=100ms)")
	useTLS := flag.Bool("tls", false, "gRPC over TLS between the callers and every server")
	sample := flag.Int("sample", 200, "after each measurement, calls made one at a time under Redis MONITOR to count the commands sent and those run inside scripts (0: none)")
	flag.Parse()
	if err := run(os.Stdout, config{d: *d, warm: *warm, rounds: max(1, *rounds), callers: *callers, conns: *conns,
		keys: *keys, limit: uint32(*limit), subjects: strings.Split(*subjects, ","), refBin: *refBin, ourBin: *ourBin,
		refEnv: split(*refEnv), oursEnv: split(*oursEnv), oursArgs: split(*oursArgs), sample: *sample, tls: *useTLS}); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

type config struct {
	d, warm         time.Duration
	rounds          int
	callers, conns  int
	keys            int
	limit           uint32
	subjects        []string
	refBin, ourBin  string
	refEnv, oursEnv []string
	oursArgs        []string
	sample          int
	tls             bool
	certs           *rlsbench.Certs // with tls: the run's certificate
}

func run(out io.Writer, c config) error {
	for _, s := range c.subjects {
		if !slices.Contains([]string{"reference", "ours/redis", "ours/memory"}, s) {
			return fmt.Errorf("unknown subject %q", s)
		}
	}
	bench, root, err := rlsbench.Dirs()
	if err != nil {
		return err
	}
	if c.refBin == "" && slices.Contains(c.subjects, "reference") {
		fmt.Fprintln(os.Stderr, "building the reference (bench/envoyref)...")
		if c.refBin, err = rlsbench.BuildReference(bench); err != nil {
			return err
		}
	}
	if c.ourBin == "" && (slices.Contains(c.subjects, "ours/redis") || slices.Contains(c.subjects, "ours/memory")) {
		fmt.Fprintln(os.Stderr, "building ours (cmd/ratelimit)...")
		if c.ourBin, err = rlsbench.BuildOurs(root); err != nil {
			return err
		}
	}
	rs, err := distbench.StartServer()
	if err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	defer rs.Stop()
	tmp, err := os.MkdirTemp("", "rlsbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg, err := rlsbench.WriteConfig(tmp, rlsbench.PerfConfig(c.limit))
	if err != nil {
		return err
	}
	if c.tls {
		if c.certs, err = rlsbench.MakeCerts(tmp); err != nil {
			return err
		}
	}
	reqs := rlsbench.PerfRequests(1<<14, c.keys, 1)
	ctx := context.Background()
	loadBefore := report.LoadAvg()
	results := map[string][]round{}
	for r := range c.rounds {
		for _, s := range c.subjects {
			fmt.Fprintf(os.Stderr, "round %d: %s\n", r+1, s)
			res, err := measure(ctx, c, s, cfg, rs, reqs)
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			results[s] = append(results[s], res)
		}
	}
	write(out, c, results, redisVersion(), loadBefore, report.LoadAvg())
	return nil
}

func measure(ctx context.Context, c config, name, cfg string, rs *distbench.Server, reqs []*pb.RateLimitRequest) (round, error) {
	if err := rlsbench.ResetRedis(ctx, rs.Addr); err != nil {
		return round{}, err
	}
	o := rlsbench.Options{ConfigDir: cfg, Redis: rs.Addr, Conns: c.conns, TLS: c.certs}
	var srv *rlsbench.Server
	var err error
	switch name {
	case "reference":
		o.Env = c.refEnv
		srv, err = rlsbench.StartReference(c.refBin, o)
	case "ours/memory":
		o.Redis = ""
		fallthrough
	default:
		o.Env = c.oursEnv
		o.Args = c.oursArgs
		srv, err = rlsbench.StartOurs(c.ourBin, o)
	}
	if err != nil {
		return round{}, err
	}
	defer srv.Stop()
	if c.warm > 0 {
		if w := rlsbench.Load(ctx, srv.Client, reqs, c.callers, c.warm); w.Calls == 0 {
			return round{}, fmt.Errorf("no call answered while warming up: %v", w.FirstErr)
		}
	}
	if err := rlsbench.ResetRedis(ctx, rs.Addr); err != nil {
		return round{}, err
	}
	cpu0, err1 := rlsbench.CPU(srv.Pid())
	rcpu0, err2 := rlsbench.CPU(rs.Pid())
	load := rlsbench.Load(ctx, srv.Client, reqs, c.callers, c.d)
	cpu1, err3 := rlsbench.CPU(srv.Pid())
	rcpu1, err4 := rlsbench.CPU(rs.Pid())
	if err := firstErr(err1, err2, err3, err4); err != nil {
		return round{}, err
	}
	cmds, err := rlsbench.CommandStats(ctx, rs.Addr)
	if err != nil {
		return round{}, err
	}
	if load.Calls == 0 {
		return round{}, fmt.Errorf("no call answered: %v\n%s", load.FirstErr, srv.Log())
	}
	var total int64
	for _, n := range cmds {
		total += n
	}
	res := round{load: load, cmds: cmds, serverCPU: cpu1 - cpu0, redisCPU: rcpu1 - rcpu0, redisCmds: total}
	if c.sample > 0 {
		sent, scripted, err := rlsbench.CountCommands(ctx, rs.Addr, func() error {
			for i := range c.sample {
				if _, err := srv.Client.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return round{}, fmt.Errorf("counting commands: %w", err)
		}
		res.sent, res.scripted = perCall(sent, c.sample), perCall(scripted, c.sample)
	}
	return res, nil
}

func perCall(m map[string]int, calls int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = float64(v) / float64(calls)
	}
	return out
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func redisVersion() string {
	b, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "redis-server unknown"
	}
	f := strings.Fields(string(b))
	for _, x := range f {
		if v, ok := strings.CutPrefix(x, "v="); ok {
			return "redis-server " + v
		}
	}
	return strings.TrimSpace(string(b))
}

// metric extracts one figure of a round.
func metric(name string) report.Metric[round] {
	return func(r round, _ string) (float64, bool) {
		l := r.load
		calls := float64(l.Calls)
		switch name {
		case "calls/s":
			return l.CallsPerSecond(), l.Calls > 0
		case "p50":
			return float64(l.P50.Microseconds()), l.Calls > 0
		case "p99":
			return float64(l.P99.Microseconds()), l.Calls > 0
		case "cmds":
			return float64(r.redisCmds) / calls, l.Calls > 0
		case "sent":
			return sum(r.sent), r.sent != nil
		case "scripted":
			return sum(r.scripted), r.scripted != nil
		case "cpu":
			return float64(r.serverCPU.Microseconds()) / calls, l.Calls > 0
		case "rcpu":
			return float64(r.redisCPU.Microseconds()) / calls, l.Calls > 0
		case "errors":
			return float64(l.Errors), true
		case "over":
			return float64(l.OverLimit) / calls, l.Calls > 0
		}
		return 0, false
	}
}

func sum(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

func med(rs []round, name string) float64 {
	v := report.Column(rs, metric(name), "")
	if len(v) == 0 {
		return 0
	}
	return report.Median(v)
}

func write(out io.Writer, c config, results map[string][]round, redisVer, loadBefore, loadAfter string) {
	transport := "gRPC connections"
	if c.tls {
		transport = "gRPC connections over TLS (TLS on both sides)"
	}
	fmt.Fprintf(out, "`ratelimit rls` against envoyproxy/ratelimit: %d callers over %d %s, two descriptors a call (%d client addresses × 100 paths, limits %d per second and per minute), %v per subject and round after %v of warm-up, median of %d round(s).\n\n",
		c.callers, c.conns, transport, c.keys, c.limit, c.d, c.warm, c.rounds)
	fmt.Fprintf(out, "| server | store | calls/s | p50 µs | p99 µs | Redis commands sent/call | run in scripts/call | all (commandstats)/call | server CPU µs/call | Redis CPU µs/call | over limit | errors |\n")
	fmt.Fprintf(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range c.subjects {
		rs := results[s]
		server, store, _ := strings.Cut(s, "/")
		if store == "" {
			store = "redis"
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f%% | %s |\n", server, store,
			report.Num(med(rs, "calls/s")), report.Num(med(rs, "p50")), report.Num(med(rs, "p99")),
			report.Num(med(rs, "sent")), report.Num(med(rs, "scripted")),
			report.Num(med(rs, "cmds")), report.Num(med(rs, "cpu")), report.Num(med(rs, "rcpu")),
			100*med(rs, "over"), report.Num(med(rs, "errors")))
	}
	fmt.Fprintln(out)
	for _, s := range c.subjects {
		rs := results[s]
		if len(rs) == 0 || rs[len(rs)-1].sent == nil {
			continue
		}
		// The breakdown of the last round's sample.
		last := rs[len(rs)-1]
		fmt.Fprintf(out, "- Redis commands per call, %s: sent %s; run in scripts %s\n", s, breakdown(last.sent), breakdown(last.scripted))
	}
	if _, ok := results["reference"]; ok && (len(results["ours/redis"]) > 0 || len(results["ours/memory"]) > 0) {
		fmt.Fprintf(out, "\n| ours / reference | calls/s | p50 | p99 | goal |\n|---|---:|---:|---:|---|\n")
		for _, s := range []string{"ours/redis", "ours/memory"} {
			if _, ok := results[s]; !ok {
				continue
			}
			joined := join(results["reference"], results[s])
			cps, lo, hi, _ := report.Ratio(joined, pair(metric("calls/s")), "b", "a")
			p50, _, _, _ := report.Ratio(joined, pair(metric("p50")), "b", "a")
			p99, _, _, _ := report.Ratio(joined, pair(metric("p99")), "b", "a")
			goal := "calls/s ≥ 1.25× and p99 ≤ 1×: "
			met := cps >= 1.25 && p99 <= 1
			if s == "ours/memory" {
				goal = "calls/s ≥ 2×: "
				met = cps >= 2
			}
			verdict := "met"
			if !met {
				verdict = "missed"
			}
			rng := ""
			if c.rounds > 1 {
				rng = fmt.Sprintf(" (rounds %s–%s)", report.Num(lo), report.Num(hi))
			}
			fmt.Fprintf(out, "| %s | %s×%s | %s× | %s× | %s%s |\n", s, report.Num(cps), rng, report.Num(p50), report.Num(p99), goal, verdict)
		}
	}
	fmt.Fprintf(out, "\nMachine: %s. Load average before %s, after %s. The reference runs with its defaults (REDIS_POOL_SIZE 10, no pipeline window, stats disabled); ours with its defaults and no --metrics.",
		report.Machine(redisVer), loadBefore, loadAfter)
	if c.tls {
		fmt.Fprint(out, " gRPC over TLS: one ECDSA P-256 certificate made for the run, served by each server from its files (the reference's GRPC_SERVER_TLS_CERT/_KEY, ours's --grpc-tls-cert/--grpc-tls-key), no client certificate, TLS 1.3 as Go negotiates it; Redis in plain text.")
	}
	fmt.Fprintln(out)
}

func breakdown(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %s", strings.ToUpper(n), report.Num(m[n])))
	}
	return strings.Join(parts, ", ")
}

// paired rounds: a is the reference's, b ours, in the same round.
type paired struct{ a, b round }

func join(a, b []round) []paired {
	var p []paired
	for i := range min(len(a), len(b)) {
		p = append(p, paired{a[i], b[i]})
	}
	return p
}

func pair(m report.Metric[round]) report.Metric[paired] {
	return func(p paired, name string) (float64, bool) {
		if name == "a" {
			return m(p.a, "")
		}
		return m(p.b, "")
	}
}
