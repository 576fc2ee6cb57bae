#!/usr/bin/env bash
# The pipeline of `make bench` and `make bench-full`, from the repository
# root: build the harness in bench/ once, run it COUNT times, one pass
# after another, so that every implementation's samples interleave in time
# (on a shared, noisy machine that is what keeps their ratios fair), keep
# the raw output with the machine's description under RESULTS, write
# benchstat's comparison with the implementations as columns, and print
# the summary (ratios, latency, bytes per key, throughput) that
# bench/cmd/report makes, with its SVG charts, from the raw output.
#
# SET says which benchmarks a pass runs. headline (make bench) runs those
# of the headline tables, the harness's -headline cut of HEADLINE_BENCHES:
# one hot key and a million keys beside the per-key peers, the HTTP
# middleware, Redis beside redis_rate, floodgate-rls beside
# envoyproxy/ratelimit; under a minute a pass on 2 cores. full (make
# bench-full) runs every benchmark of FULL_BENCHES, every family whole;
# some 4½ minutes a pass, of which BenchmarkIdle takes 27 s and
# BenchmarkXDS 50 s whatever BENCHTIME says (each leaves a service idle,
# or loads it, for a fixed time), and BenchmarkRLS's CPU profiles 16 s.
#
# A pass with a failing benchmark (only a limiter that admits past its
# rule fails one; denials are reported, not failed) does not stop the run:
# every pass runs, RESULTS is written, and the script then exits 1 and
# says so. Any other step that fails stops it with that step's status.
#
# Settings, from the environment (the Makefile passes its own):
#   GO, BENCHSTAT (a go run argument), SET (headline or full), COUNT,
#   BENCHTIME, GOROUTINES, BENCHES (a -test.bench pattern; empty: SET's
#   families), RESULTS (a folder), and MAKECMD, the command line recorded
#   at the head of the raw output.
set -euo pipefail
cd "$(dirname "$0")/.."

HEADLINE_BENCHES='^Benchmark(Allow|Keys|Middleware|Redis|RLS)$'
FULL_BENCHES='^Benchmark(Allow|Keys|Latency|Goroutines|Paired|BytesPerKey|DependentLoad|ClockRead|Middleware|Redis|RLS|XDS|TLS|Idle|Charge|InFlight|InFlightRedis)$'

: "${GO:=go}" "${SET:=headline}" "${COUNT:=6}" "${BENCHTIME:=100ms}" "${GOROUTINES:=1,4,64}" "${RESULTS:=results}"
: "${BENCHSTAT:=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da}"
: "${MAKECMD:=bench/run.sh}"
case "$SET" in
headline)
	: "${BENCHES:=$HEADLINE_BENCHES}"
	cut=(-headline)
	;;
full)
	: "${BENCHES:=$FULL_BENCHES}"
	cut=()
	;;
*)
	echo "bench/run.sh: SET=$SET: want headline (make bench) or full (make bench-full)" >&2
	exit 2
	;;
esac

mkdir -p "$RESULTS"
results=$(cd "$RESULTS" && pwd)
raw=$results/bench-raw.txt
args=(-test.run '^$' -test.bench "$BENCHES" -test.benchmem -test.count 1 -test.benchtime "$BENCHTIME" -goroutines "$GOROUTINES" ${cut[@]+"${cut[@]}"})

(cd bench && "$GO" test -c -o bench.test .)
# The services' binaries (envoyproxy/ratelimit's, floodgate-rls's), built
# by the first pass that needs them and used by every pass after it.
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
export FLOODGATE_BENCH_BINS=$bins

# What a run writes is no change to the code it measures.
exclude=(":!results")
case "$RESULTS" in /*) ;; *) exclude+=(":!$RESULTS") ;; esac
dirty=""
if git status --porcelain -- . "${exclude[@]}" 2>/dev/null | grep -q .; then
	dirty=" (with uncommitted changes)"
fi
{
	echo "# command: $MAKECMD COUNT=$COUNT BENCHTIME=$BENCHTIME GOROUTINES=$GOROUTINES ($COUNT passes of: cd bench && ./bench.test ${args[*]})"
	echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$dirty"
	echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/ *$//'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
	echo "# go: $("$GO" version)"
} > "$raw"

failed=0
for i in $(seq "$COUNT"); do
	echo "pass $i of $COUNT" >&2
	start=$SECONDS
	(cd bench && ./bench.test "${args[@]}") >> "$raw" || failed=$((failed + 1))
	echo "pass $i of $COUNT took $((SECONDS - start)) s" >&2
done
"$GO" run "$BENCHSTAT" -col /impl "$raw" > "$results/bench-benchstat.txt"
(cd bench && "$GO" run ./cmd/report -in "$raw" -out "$results")
if [ "$failed" -gt 0 ]; then
	echo "$MAKECMD: $failed of $COUNT passes had a failing benchmark (--- FAIL in $raw); $RESULTS was written all the same" >&2
	exit 1
fi
