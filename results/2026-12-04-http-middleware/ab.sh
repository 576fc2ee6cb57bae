#!/bin/bash
# usage: ab.sh OUTDIR ROUNDS — BenchmarkMiddleware, before and after
# interleaved, the order swapped every round, from the bench binaries
# $BEFORE and $AFTER (each built from a clean clone: cd bench && go test -c),
# run in $CLONE/bench. Two measures per round:
#   pass-*.txt: one pass of 100 ms a figure (make bench's BENCHTIME), whose
#               added-time ratios ratio.py takes per pass, then the median;
#   min-*.txt:  10 repetitions of 3 ms a figure, whose minimum ratio.py takes:
#               on a shared machine the least disturbed sample of each figure.
out=$1; n=${2:-10}
mkdir -p "$out"
for v in before after; do : > "$out/pass-$v.txt"; : > "$out/min-$v.txt"; done
B='^BenchmarkMiddleware$'
for i in $(seq "$n"); do
  for v in before after; do
    [ $((i % 2)) = 0 ] && v=$([ $v = before ] && echo after || echo before)
    bin=$([ $v = before ] && echo "$BEFORE" || echo "$AFTER")
    echo "# pass $i" >> "$out/pass-$v.txt"
    (cd "$CLONE/bench" && "$bin" -test.run '^$' -test.bench "$B" -test.benchmem -test.count 1 -test.benchtime 100ms) >> "$out/pass-$v.txt"
    (cd "$CLONE/bench" && "$bin" -test.run '^$' -test.bench "$B" -test.benchmem -test.count 10 -test.benchtime 3ms) >> "$out/min-$v.txt"
  done
done
