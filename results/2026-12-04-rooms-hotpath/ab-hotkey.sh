#!/bin/bash
out=$1; n=${2:-30}
mkdir -p $out; : > $out/before.txt; : > $out/after.txt
RB='BenchmarkAllow/scenario=(hotkey|hotkey-parallel)/impl=floodgate-(tb|lb|fw|sc|sl)(-coarse)?$'
for i in $(seq $n); do
  for v in before after; do
    [ $((i % 2)) = 0 ] && v=$([ $v = before ] && echo after || echo before)
    (cd $CLONE/bench && /tmp/$v/bench.test -test.run '^$' -test.bench "$RB" -test.benchtime 200ms -test.benchmem) >> $out/$v.txt
  done
done
