#!/bin/sh
# perf.sh regenerates every table of docs/performance.md, on this machine,
# in one go (about 20 minutes). Run it from bench/ on an otherwise idle
# machine; the outputs record the load average before and after each part.
# The Redis parts start their own redis-server on a free loopback port
# (redis-server must be on the PATH).
#
#	./perf.sh [outdir]     # default: perf-out
#
# For a quick check of the script itself (figures then mean nothing):
#	COUNT=1 REPS=1 WINDOW=100ms D=200ms BENCHTIME=20ms KEYED_COUNT=1 \
#	KEYED_BENCHTIME=20ms REDIS_COUNT=1 REDIS_BENCHTIME=20ms DIST_COUNT=1 \
#	DIST_BENCHTIME=20ms HTTP_COUNT=1 HTTP_BENCHTIME=20ms FLEET=1,16 \
#	RLS_FLAGS='-d 300ms -warm 100ms' \
#	./perf.sh /tmp/perf-try
#
# Outputs (Markdown, plus the raw `go test -bench` lines for benchstat):
#	machine.txt   go version, CPUs, CPU model, kernel, clock source, load
#	root.md       package ratelimit's own benchmarks (median of 7 rounds)
#	smooth.md     the engine's benchmarks (median of 7 rounds)
#	peers.md      ours vs x/time/rate, uber, juju in the same rounds, ratios
#	cpu.md        RunParallel benchmarks at GOMAXPROCS 1, 2 and 4
#	accuracy.md   blocking acquire loop: achieved / configured rate
#	shaping.md    shaped byte streams: achieved rate, worst 100 ms window
#	keyed.md      throttle's memory store vs the Go keyed peers (bench/keyed)
#	redis.md      throttle's Redis store vs go-redis/redis_rate (bench/distbench -bench Keyed)
#	distributed.md  distributed TryAcquire vs local and redis_rate (bench/distbench)
#	fleet.md      N processes on one name: Redis cost against fleet size
#	http.md       httplimit middleware vs the Go peers, and ratelimit proxy
#	rls.md        ratelimit rls vs envoyproxy/ratelimit (bench/cmd/rlsbench)
#	rls-tls.md    the same with gRPC over TLS (rlsbench -tls)
#	rlqs.md       ratelimit rlqs under 1 000 simulated Envoys (bench/cmd/rlqsbench)
#
# Set ONLY to a space-separated list of parts to run just those, e.g.
#	ONLY="keyed http" ./perf.sh
set -eu
out=${1:-perf-out}
count=${COUNT:-7}
reps=${REPS:-3}
window=${WINDOW:-1s}
d=${D:-2s}
benchtime=${BENCHTIME:-200ms}
mkdir -p "$out"
{
	go version
	echo "nproc: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo
	lscpu 2>/dev/null | grep -E '^(CPU family|Model|Hypervisor vendor):' || true
	echo "kernel: $(uname -r)"
	echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
want() { [ -z "${ONLY:-}" ] || case " $ONLY " in *" $1 "*) true ;; *) false ;; esac; }
want root && go run ./cmd/ratios -count "$count" -benchtime "$benchtime" -dir .. -raw "$out/root_raw.txt" > "$out/root.md"
want smooth && go run ./cmd/ratios -count "$count" -benchtime "$benchtime" -dir ../smooth -raw "$out/smooth_raw.txt" > "$out/smooth.md"
want peers && go run ./cmd/ratios -count "$count" -benchtime "$benchtime" -raw "$out/peers_raw.txt" > "$out/peers.md"
want cpu && go run ./cmd/ratios -count "$(( (count + 1) / 2 ))" -benchtime "$benchtime" -bench Parallel -cpu 1,2,4 -raw "$out/cpu_raw.txt" > "$out/cpu.md"
want accuracy && go run ./cmd/accuracy -reps "$reps" -window "$window" > "$out/accuracy.md"
want shaping && go run ./cmd/shaping -reps "$reps" -d "$d" > "$out/shaping.md"
# The keyed, Redis, fleet and HTTP tables: longer rounds, their own commands.
want keyed && go run ./cmd/keyedbench -count "${KEYED_COUNT:-15}" -benchtime "${KEYED_BENCHTIME:-300ms}" -raw "$out/keyed_raw.txt" > "$out/keyed.md"
want redis && go run ./cmd/distbench -bench Keyed -count "${REDIS_COUNT:-11}" -benchtime "${REDIS_BENCHTIME:-1s}" -raw "$out/redis_raw.txt" > "$out/redis.md"
want distributed && go run ./cmd/distbench -count "${DIST_COUNT:-5}" -benchtime "${DIST_BENCHTIME:-1s}" -raw "$out/distributed_raw.txt" > "$out/distributed.md"
want fleet && go run ./cmd/distbench -fleet "${FLEET:-1,16,256,1024}" > "$out/fleet.md"
want http && go run ./cmd/httpbench -count "${HTTP_COUNT:-9}" -benchtime "${HTTP_BENCHTIME:-1s}" -raw "$out/http_raw.txt" > "$out/http.md"
# Envoy's rate limit service against envoyproxy/ratelimit (bench/cmd/rlsbench;
# skipped in a tree that does not have it yet).
if want rls && [ -d cmd/rlsbench ]; then
	go run ./cmd/rlsbench ${RLS_FLAGS:--d 10s -rounds 3} > "$out/rls.md"
fi
want rls-tls && go run ./cmd/rlsbench ${RLS_FLAGS:--d 10s -rounds 3} -tls > "$out/rls-tls.md"
want rlqs && go run ./cmd/rlqsbench > "$out/rlqs.md"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
