#!/bin/sh
# perf.sh regenerates every table of docs/performance.md, on this machine,
# in one go (about 7 minutes). Run it from bench/ on an otherwise idle
# machine; the outputs record the load average before and after each part.
#
#	./perf.sh [outdir]     # default: perf-out
#
# For a quick check of the script itself (figures then mean nothing):
#	COUNT=1 REPS=1 WINDOW=100ms D=200ms BENCHTIME=20ms ./perf.sh /tmp/perf-try
#
# Outputs (Markdown, plus the raw `go test -bench` lines for benchstat):
#	machine.txt   go version, CPUs, CPU model, kernel, clock source, load
#	root.md       package ratelimit's own benchmarks (median of 7 rounds)
#	smooth.md     the engine's benchmarks (median of 7 rounds)
#	peers.md      ours vs x/time/rate, uber, juju in the same rounds, ratios
#	cpu.md        RunParallel benchmarks at GOMAXPROCS 1, 2 and 4
#	accuracy.md   blocking acquire loop: achieved / configured rate
#	shaping.md    shaped byte streams: achieved rate, worst 100 ms window
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
go run ./cmd/ratios -count "$count" -benchtime "$benchtime" -dir .. -raw "$out/root_raw.txt" > "$out/root.md"
go run ./cmd/ratios -count "$count" -benchtime "$benchtime" -dir ../smooth -raw "$out/smooth_raw.txt" > "$out/smooth.md"
go run ./cmd/ratios -count "$count" -benchtime "$benchtime" -raw "$out/peers_raw.txt" > "$out/peers.md"
go run ./cmd/ratios -count "$(( (count + 1) / 2 ))" -benchtime "$benchtime" -bench Parallel -cpu 1,2,4 -raw "$out/cpu_raw.txt" > "$out/cpu.md"
go run ./cmd/accuracy -reps "$reps" -window "$window" > "$out/accuracy.md"
go run ./cmd/shaping -reps "$reps" -d "$d" > "$out/shaping.md"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
