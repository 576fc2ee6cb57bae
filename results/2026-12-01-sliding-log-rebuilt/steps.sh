#!/bin/sh
# steps.sh: which step of issue 12 bought what. For each commit below, it
# builds bench/ as it stands at HEAD (the same harness for every step) on
# the core as it stood at that commit, then runs the sliding log and its
# twin through the hot-key scenarios, the goroutine sweep and the 1K-key
# scenarios, every step once per pass, COUNT passes, so that the steps'
# samples interleave in time. It writes steps-raw.txt and benchstat's
# comparison, steps-benchstat.txt, beside itself.
#
#   sh results/2026-12-01-sliding-log-rebuilt/steps.sh            (from the repository root)
#   COUNT=8 BENCHTIME=100ms sh results/2026-12-01-sliding-log-rebuilt/steps.sh
set -eu
COUNT=${COUNT:-6}
BENCHTIME=${BENCHTIME:-100ms}
STEPS=${STEPS:-"base:23c41a8 claim:0eb8e27 decide-view:d0a5f93 one-alloc:f0cb842 shrink:51a7e77 retry:59399b4"}
BENCHSTAT=${BENCHSTAT:-golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da}
root=$(git rev-parse --show-toplevel)
out=$root/results/2026-12-01-sliding-log-rebuilt
work=$(mktemp -d)
trap 'for s in $STEPS; do git -C "$root" worktree remove --force "$work/${s%%:*}" 2>/dev/null || true; done; rm -rf "$work"' EXIT
for s in $STEPS; do
	name=${s%%:*} commit=${s##*:}
	git -C "$root" worktree add --detach -q "$work/$name" "$commit"
	rm -rf "$work/$name/bench" && cp -r "$root/bench" "$work/$name/bench"
	(cd "$work/$name/bench" && go test -c -o "$work/$name.test" .)
done
{
	echo "# command: COUNT=$COUNT BENCHTIME=$BENCHTIME sh results/2026-12-01-sliding-log-rebuilt/steps.sh (steps: $STEPS)"
	echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/ *$//'), $(nproc) cores"
	echo "# go: $(go version)"
} > "$out/steps-raw.txt"
for i in $(seq "$COUNT"); do
	echo "pass $i of $COUNT" >&2
	for s in $STEPS; do
		name=${s%%:*}
		for pattern in 'BenchmarkAllow/^scenario=hotkey(-parallel)?$/^impl=floodgate-sl(-mutex)?$' \
			'BenchmarkGoroutines/^impl=floodgate-sl(-mutex)?$/hotkey/' \
			'BenchmarkKeys/^impl=floodgate-sl(-mutex)?$/^scenario=1K-'; do
			(cd "$work/$name/bench" && "$work/$name.test" -test.run '^$' -test.bench "$pattern" \
				-test.benchtime "$BENCHTIME" -goroutines 1,4,64) |
				grep '^Benchmark' | sed "s|impl=floodgate-sl-mutex|impl=mutex@$name|; s|impl=floodgate-sl|impl=lockfree@$name|"
		done
	done >> "$out/steps-raw.txt"
done
go run "$BENCHSTAT" -col /impl "$out/steps-raw.txt" > "$out/steps-benchstat.txt"
cat "$out/steps-benchstat.txt"
