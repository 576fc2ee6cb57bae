#!/bin/bash
# usage: ab.sh OUTDIR COUNT — before/after interleaved, the order swapped every round
out=$1; n=${2:-6}
mkdir -p $out; : > $out/before.txt; : > $out/after.txt
RB='BenchmarkAllow/scenario=(hotkey|hotkey-parallel|denial|denial-parallel|globalcap-parallel)/impl=floodgate-(tb|lb|fw|sc|sl)(-mutex)?(-coarse)?$'
for i in $(seq $n); do
  for v in before after; do
    [ $((i % 2)) = 0 ] && v=$([ $v = before ] && echo after || echo before)
    (cd $CLONE && /tmp/$v/root.test -test.run '^$' -test.bench 'BenchmarkAllowN|BenchmarkAllowNoClock' -test.benchtime 200ms -test.benchmem) >> $out/$v.txt
    (cd $CLONE/bench && /tmp/$v/bench.test -test.run '^$' -test.bench "$RB" -test.benchtime 200ms -test.benchmem) >> $out/$v.txt
  done
done
