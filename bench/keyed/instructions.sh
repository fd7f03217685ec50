#!/bin/sh
# instructions.sh counts what one decision on an existing key costs each
# store of BenchmarkKeyed (serial) under valgrind's callgrind: figures
# that, unlike ns/op, do not move with the load of a shared machine. Each
# store runs twice, with N1 and N2 decisions after the same warm-up, and
# the difference is divided by N2 − N1, so the warm-up and the test
# binary's start cancel out. GOGC=off keeps the collector (whose work
# depends on timing) out of the counts; asyncpreemptoff keeps callgrind
# from tripping on the runtime's preemption signals.
#
#	cd bench/keyed && ./instructions.sh [store ...]   # default: all of them
#
# With CACHE=1 it also simulates a 64 KiB L1d and a 1 MiB L2 (this VM's
# per-core caches) and prints the data reads that miss each per decision:
# a miss in L2 is a trip to L3 or memory. Needs valgrind; about 10 s per
# store (25 s with CACHE=1).
set -eu
n1=${N1:-20000}
n2=${N2:-220000}
sim=""
if [ "${CACHE:-0}" = 1 ]; then
	sim="--cache-sim=yes --D1=65536,8,64 --LL=1048576,16,64"
fi
bin=$(mktemp)
out=$(mktemp)
trap 'rm -f "$bin" "$out"' EXIT
go test -c -o "$bin" .
stores=${*:-ours-gcra ours-fixed-window ours-sliding-window sethvargo throttled ulule httprate}
# count prints the totals line's Ir, D1mr and DLmr (0 0 without CACHE).
count() {
	# shellcheck disable=SC2086
	GOGC=off GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind $sim --callgrind-out-file="$out" \
		"$bin" -test.run XXX -test.bench "^BenchmarkKeyed\$/^$1\$" -test.benchtime "${2}x" >/dev/null 2>&1
	awk '/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i }
		/^(summary|totals):/ { print $col["Ir"], (col["D1mr"] ? $col["D1mr"] : 0), (col["DLmr"] ? $col["DLmr"] : 0); exit }' "$out"
}
for s in $stores; do
	set -- $(count "$s" "$n1") $(count "$s" "$n2")
	d=$((n2 - n1))
	if [ -n "$sim" ]; then
		awk -v s="$s" -v d="$d" -v i="$(($4 - $1))" -v l1="$(($5 - $2))" -v l2="$(($6 - $3))" \
			'BEGIN { printf "%s %d instructions/decision, %.2f L1d and %.2f L2 read misses/decision\n", s, i / d, l1 / d, l2 / d }'
	else
		echo "$s $((($4 - $1) / d)) instructions/decision"
	fi
done
