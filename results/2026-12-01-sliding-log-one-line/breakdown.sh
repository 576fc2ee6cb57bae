#!/bin/sh
# breakdown.sh: where the time of a sliding-log grant goes at 1K keys
# from both cores (the scenario of issue 12's one missed target), and the
# time of its mutex twin's; then three designs that remove or move one of
# the log's cache misses, timed against the twin. It needs perf (Debian's
# linux-perf) and writes breakdown.txt beside itself.
#
#   sh results/2026-12-01-sliding-log-one-line/breakdown.sh        (from the repository root)
#   PROFILES=0 KEYS=1 VARIANTS=one-line REPS=6 OUT=breakdown-hotkey.txt \
#       sh results/2026-12-01-sliding-log-one-line/breakdown.sh      (the hot key, no profiles)
#
# The profiles sample cpu-clock (this VM has no hardware counters): a
# sample lands on the oldest instruction not yet retired, so the
# instruction after a load that misses carries that miss's wait. "head"
# is the log as it stood before this breakdown, at BASE; each variant is
# BASE with one diff of variants/ applied (one-line is what the commit
# after BASE made of it):
#   one-line     the Log in one 64-byte line, its ring's address tagged
#                with the ring's size, so that a claim reads no header
#   line-guess   one-line, and the head guess moved only when the head
#                enters a new line of slots, found in the line by three
#                loads and no branch
#   rare-guess   the head guess moved every 64 claims (not a design: it
#                shows what the guess's writes cost the Log's line)
set -eu
BASE=${BASE:-da6cd43}
ROUNDS=${ROUNDS:-20}
REPS=${REPS:-4}
KEYS=${KEYS:-1000}
PROFILES=${PROFILES:-1}
OUT=${OUT:-breakdown.txt}
VARIANTS=${VARIANTS:-"one-line line-guess rare-guess"}
root=$(git rev-parse --show-toplevel)
out=$root/results/2026-12-01-sliding-log-one-line
work=$(mktemp -d)
trap 'for v in head $VARIANTS; do git -C "$root" worktree remove --force "$work/$v" 2>/dev/null || true; done; rm -rf "$work"' EXIT
for v in head $VARIANTS; do
	git -C "$root" worktree add --detach -q "$work/$v" "$BASE"
	if [ "$v" != head ]; then git -C "$work/$v" apply "$out/variants/$v.diff"; fi
	(cd "$work/$v/bench" && go build -o "$work/pair-$v" ./cmd/pair)
done
profile() { # name, pair binary, flags...
	name=$1 bin=$2
	shift 2
	perf record -q -e cpu-clock -F 20000 -o "$work/$name.data" "$bin" "$@" -rounds 30 -round 40ms >"$work/$name.out" 2>/dev/null
	echo "## $name: pair $*"
	grep ns/op "$work/$name.out"
	echo "### functions at 1% of samples or more"
	perf report -i "$work/$name.data" --stdio --sort symbol 2>/dev/null | awk '$1 ~ /%$/ && $1+0 >= 1 {print $1, $3}'
	for fn in 'shardedlog.(*Log).Take' 'shardedlog.(*MutexLog).AllowN' 'shardedlog.(*MutexLog).answer'; do
		perf annotate -i "$work/$name.data" --stdio -s "github.com/floodgate-go/floodgate/$fn" 2>/dev/null |
			awk -v fn="$fn" '$2 != ":" {next} $1+0 >= 1 {if (!n++) print "### " fn ": instructions at 1% of its samples or more, each after the one before it"; print "        " prev; print} {prev = $0}'
	done
	echo
}
{
	echo "# command: sh results/2026-12-01-sliding-log-one-line/breakdown.sh (ROUNDS=$ROUNDS REPS=$REPS KEYS=$KEYS PROFILES=$PROFILES VARIANTS=\"$VARIANTS\")"
	echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/ *$//'), $(nproc) cores"
	echo "# go: $(go version)"
	echo "# commit: $BASE"
	echo
	if [ "$PROFILES" = 1 ]; then
		profile head-sl "$work/pair-head" -impls floodgate-sl -keys 1000 -g 2
		profile head-twin "$work/pair-head" -impls floodgate-sl-mutex -keys 1000 -g 2
		profile rare-guess-sl "$work/pair-rare-guess" -impls floodgate-sl -keys 1000 -g 2
		profile one-line-sl "$work/pair-one-line" -impls floodgate-sl -keys 1000 -g 2
	fi
	echo "## each variant ÷ the twin, in one process, $REPS times over (pair -rounds $ROUNDS -round 40ms)"
	for g in 2 1; do
		for i in $(seq "$REPS"); do
			for v in head $VARIANTS; do
				r=$("$work/pair-$v" -keys "$KEYS" -g "$g" -rounds "$ROUNDS" -round 40ms | awk '/^floodgate-sl /{print $2, "ns/op, ÷ twin", $6, $7, $8}')
				echo "$KEYS keys, uniform, $g goroutines, $v: $r"
			done
		done
	done
} > "$out/$OUT"
