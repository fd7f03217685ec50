package main

import (
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/bench/internal/report"
	"github.com/smoothrate/ratelimit/bench/rlsbench"
)

func fakeRound(calls int, p99 time.Duration, sent map[string]float64) round {
	return round{
		load:      rlsbench.LoadResult{Calls: calls, Elapsed: time.Second, P50: p99 / 2, P99: p99},
		cmds:      map[string]int64{"incrby": int64(2 * calls)},
		redisCmds: int64(2 * calls),
		sent:      sent,
		scripted:  map[string]float64{},
	}
}

// TestWrite checks the table and the verdicts against the goals: Redis
// needs 1.25× the calls per second and a p99 no worse, memory 2×.
func TestWrite(t *testing.T) {
	c := config{d: time.Second, rounds: 1, callers: 32, conns: 4, keys: 10, limit: 100,
		subjects: []string{"reference", "ours/redis", "ours/memory"}}
	results := map[string][]round{
		"reference":   {fakeRound(1000, 10*time.Millisecond, map[string]float64{"incrby": 2, "expire": 2})},
		"ours/redis":  {fakeRound(1300, 11*time.Millisecond, map[string]float64{"evalsha": 1})},
		"ours/memory": {fakeRound(2100, 5*time.Millisecond, map[string]float64{})},
	}
	var b strings.Builder
	write(&b, c, results, "redis-server 7", "0 0 0", "0 0 0")
	out := b.String()
	if m := report.Missing(out,
		"| reference | redis | 1000 | 5000 | 10000 | 4 | 0 | 2 |",
		"| ours | redis | 1300 |",
		"| ours | memory | 2100 |",
		"- Redis commands per call, reference: sent EXPIRE 2, INCRBY 2; run in scripts none",
		"- Redis commands per call, ours/redis: sent EVALSHA 1; run in scripts none",
		"| ours/redis | 1.30× | 1.10× | 1.10× | calls/s ≥ 1.25× and p99 ≤ 1×: missed |",
		"| ours/memory | 2.10× | 0.50× | 0.50× | calls/s ≥ 2×: met |",
	); len(m) > 0 {
		t.Errorf("missing %q in\n%s", m, out)
	}
}

// TestWriteTLS: with -tls the table says so.
func TestWriteTLS(t *testing.T) {
	c := config{d: time.Second, rounds: 1, callers: 32, conns: 4, keys: 10, limit: 100,
		subjects: []string{"reference", "ours/redis"}, tls: true}
	results := map[string][]round{
		"reference":  {fakeRound(1000, 10*time.Millisecond, nil)},
		"ours/redis": {fakeRound(1300, 9*time.Millisecond, nil)},
	}
	var b strings.Builder
	write(&b, c, results, "redis-server 7", "0 0 0", "0 0 0")
	out := b.String()
	if m := report.Missing(out,
		"32 callers over 4 gRPC connections over TLS (TLS on both sides)",
		"| ours/redis | 1.30× | 0.90× | 0.90× | calls/s ≥ 1.25× and p99 ≤ 1×: met |",
		"gRPC over TLS: one ECDSA P-256 certificate",
	); len(m) > 0 {
		t.Errorf("missing %q in\n%s", m, out)
	}
}
