// Command rlqsbench measures one RLQS server under simulated Envoys:
// -clients streams, each reporting its -buckets buckets in one message
// every -interval, as Envoy's rate_limit_quota filter does. The server runs
// in a process of its own with GOMAXPROCS -server-procs (2: the 2-core
// server the project's goals are set for), on loopback gRPC: by default (-server binary) the
// `ratelimit rlqs` command as operators run it, built from the working tree
// (as bench/rlsbench builds `ratelimit rls`), with its gRPC server, health
// service, outage log and metrics collector; with -server library, this
// program re-run with -serve around package rlqs alone (and
// -server-cpuprofile for its profile). With -stores redis it shares its
// limits through a redis-server that rlqsbench starts. It prints, as Markdown, per store:
// bucket reports per second, the server's CPU time per report and its CPU
// use in cores, Redis commands and redis-server CPU time per report, and
// the latency from a report to the response that answers every bucket in
// it (the assignment it causes: at once for a renewal, after the next
// allocation for a new or changed share), p50, p99 and max; then the
// goal: one 2-core server keeps up with 1 000 clients with a p99 under
// 50 ms.
//
//	cd bench && go run ./cmd/rlqsbench                 # the command, alone and on Redis
//	cd bench && go run ./cmd/rlqsbench -server library # package rlqs in a program of its own
//
// A quick check that it works (figures then mean nothing):
//
//	cd bench && go run ./cmd/rlqsbench -clients 50 -d 2s -warm 1s
//
// Each client wants, of each bucket, a random part (0.5 to 1.5) of twice
// an equal share of its limit, so every bucket is contended and shares
// move with the reports. The load generator and the server share the
// machine's CPUs: run it on an otherwise idle machine.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/smoothrate/ratelimit/bench/distbench"
	"github.com/smoothrate/ratelimit/bench/rlsbench"
)

type config struct {
	clients, buckets int
	interval         time.Duration
	d, warm          time.Duration
	rate             float64 // each bucket's limit, requests per second
	stores           []string
	serverProcs      int
	server           string // "binary" or "library"
	profile          string
}

func main() {
	var c config
	flag.IntVar(&c.clients, "clients", 1000, "simulated Envoys (one stream and connection each)")
	flag.IntVar(&c.buckets, "buckets", 10, "buckets each Envoy reports")
	flag.DurationVar(&c.interval, "interval", time.Second, "reporting interval")
	flag.DurationVar(&c.d, "d", 30*time.Second, "measured time per store")
	flag.DurationVar(&c.warm, "warm", 5*time.Second, "load before each measurement (not measured)")
	flag.Float64Var(&c.rate, "rate", 10000, "each bucket's limit, requests per second")
	stores := flag.String("stores", "memory,redis", "the servers to measure: memory (alone), redis (a RedisStore)")
	flag.IntVar(&c.serverProcs, "server-procs", 2, "GOMAXPROCS of the server's process")
	flag.StringVar(&c.server, "server", "binary", "the server measured: binary (`ratelimit rlqs`, built from the working tree) or library (package rlqs served by this program)")
	profile := flag.String("server-cpuprofile", "", "with -server library: write the server's CPU profile to this `file`")
	serve := flag.String("serve", "", "(internal) run the server on this address")
	redisAddr := flag.String("redis", "", "(internal) the server's Redis")
	flag.Parse()
	c.stores = strings.Split(*stores, ",")
	c.profile = *profile
	if *serve != "" {
		if err := runServer(*serve, *redisAddr, c.buckets, c.rate, c.interval, *profile); err != nil {
			fmt.Fprintln(os.Stderr, "rlqsbench server:", err)
			os.Exit(1)
		}
		return
	}
	if c.server != "binary" && c.server != "library" {
		fmt.Fprintf(os.Stderr, "rlqsbench: -server %q: want binary or library\n", c.server)
		os.Exit(2)
	}
	if c.profile != "" && c.server != "library" {
		fmt.Fprintln(os.Stderr, "rlqsbench: -server-cpuprofile needs -server library (the command has no profile flag)")
		os.Exit(2)
	}
	if err := run(os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "rlqsbench:", err)
		os.Exit(1)
	}
}

// result is one store's measurement.
type result struct {
	store            string
	load             loadResult
	serverCPU        time.Duration
	redisCPU         time.Duration
	redisCmds        int64
	elapsed          time.Duration
	reportsPerSecond float64
}

func run(w io.Writer, c config) error {
	srv, err := newServerRunner(c)
	if err != nil {
		return err
	}
	defer srv.cleanup()
	var results []result
	for _, store := range c.stores {
		r, err := measure(srv, store, c)
		if err != nil {
			return fmt.Errorf("%s: %w", store, err)
		}
		results = append(results, r)
	}
	write(w, c, results)
	return nil
}

// measure starts the server (and redis-server), runs the load, and
// measures one store.
func measure(sr *serverRunner, store string, c config) (result, error) {
	r := result{store: store}
	var redis *distbench.Server
	redisAddr := ""
	switch store {
	case "memory":
	case "redis":
		var err error
		if redis, err = distbench.StartServer(); err != nil {
			return r, err
		}
		defer redis.Stop()
		redisAddr = redis.Addr
	default:
		return r, fmt.Errorf("unknown store %q (want memory or redis)", store)
	}
	srv, addr, err := sr.start(store, redisAddr)
	if err != nil {
		return r, err
	}
	defer stopServer(srv)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, err := newGenerator(ctx, addr, c)
	if err != nil {
		return r, err
	}
	defer g.close()
	time.Sleep(c.warm)

	cpu0, err := rlsbench.CPU(srv.Process.Pid)
	if err != nil {
		return r, err
	}
	var cmds0 map[string]int64
	var rcpu0 time.Duration
	if redis != nil {
		if cmds0, err = rlsbench.CommandStats(ctx, redis.Addr); err != nil {
			return r, err
		}
		if rcpu0, err = rlsbench.CPU(redis.Pid()); err != nil {
			return r, err
		}
	}
	g.reset()
	start := time.Now()
	time.Sleep(c.d)
	r.load = g.take()
	r.elapsed = time.Since(start)
	cpu1, err := rlsbench.CPU(srv.Process.Pid)
	if err != nil {
		return r, err
	}
	r.serverCPU = cpu1 - cpu0
	if redis != nil {
		cmds1, err := rlsbench.CommandStats(ctx, redis.Addr)
		if err != nil {
			return r, err
		}
		for k, v := range cmds1 {
			r.redisCmds += v - cmds0[k]
		}
		rcpu1, err := rlsbench.CPU(redis.Pid())
		if err != nil {
			return r, err
		}
		r.redisCPU = rcpu1 - rcpu0
	}
	r.reportsPerSecond = float64(r.load.reports) / r.elapsed.Seconds()
	return r, nil
}

// startServer runs bin with args under GOMAXPROCS procs and returns once
// its first line on standard output names the address it serves on (addr
// finds it in the line).
func startServer(bin string, args []string, procs int, addr func(line string) string) (*exec.Cmd, string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(procs))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	first := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		first <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case line := <-first:
		a := addr(line)
		if a == "" {
			stopServer(cmd)
			return nil, "", fmt.Errorf("the server did not start (its first line: %q)", line)
		}
		return cmd, a, nil
	case <-time.After(30 * time.Second):
		stopServer(cmd)
		return nil, "", fmt.Errorf("the server did not start within 30 s")
	}
}

func stopServer(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// waitForSignal returns when the process gets SIGTERM or SIGINT.
func waitForSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}

func write(w io.Writer, c config, results []result) {
	what := "`ratelimit rlqs`"
	if c.server == "library" {
		what = "package rlqs"
	}
	fmt.Fprintf(w, "One RLQS server (%s, GOMAXPROCS %d), %d Envoys × %d buckets reporting every %v, %v measured after %v:\n\n",
		what, c.serverProcs, c.clients, c.buckets, c.interval, c.d, c.warm)
	fmt.Fprintln(w, "| store | bucket reports/s | server CPU per report | server CPU (cores) | Redis commands per report | redis-server CPU per report | latency p50 | p99 | max | assignments changed/s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		per := func(d time.Duration) string {
			if r.load.reports == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f µs", float64(d.Microseconds())/float64(r.load.reports))
		}
		cmds, rcpu := "–", "–"
		if r.store == "redis" && r.load.reports > 0 {
			cmds = fmt.Sprintf("%.3f", float64(r.redisCmds)/float64(r.load.reports))
			rcpu = per(r.redisCPU)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %.2f | %s | %s | %v | %v | %v | %.0f |\n", r.store, r.reportsPerSecond,
			per(r.serverCPU), r.serverCPU.Seconds()/r.elapsed.Seconds(), cmds, rcpu,
			round(r.load.p50), round(r.load.p99), round(r.load.max), float64(r.load.changed)/r.elapsed.Seconds())
	}
	fmt.Fprintln(w)
	// Every Envoy reports each of its buckets once an interval: a server
	// that refuses some Envoys' streams answers fewer.
	want := float64(c.clients*c.buckets) / c.interval.Seconds()
	for _, r := range results {
		verdict := "met"
		if c.clients < 1000 || c.serverProcs > 2 {
			verdict = "not measured (needs -clients 1000 or more and -server-procs 2 or fewer)"
		} else if r.load.p99 >= 50*time.Millisecond || r.load.missed > 0 || r.reportsPerSecond < 0.95*want {
			verdict = "NOT met"
		}
		fmt.Fprintf(w, "Goal (%s): a 2-core server keeps up with 1 000 Envoys, p99 under 50 ms: %s (p99 %v, %d reports unanswered, %.0f of the %.0f bucket reports/s the Envoys send).\n",
			r.store, verdict, round(r.load.p99), r.load.missed, r.reportsPerSecond, want)
	}
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
