#!/bin/bash
# ab.sh ROUNDS OUT BUILD...: runs BenchmarkRedis's floodgate and redis_rate
# figures with each build's bench binary ($BINS/bench-BUILD.test, built by
# `go test -c` in the bench module of that build), the builds in turn, each
# round appending to $OUT-BUILD.txt; BT is -test.benchtime (1s).
rounds=$1; out=$2; shift 2
cd "${BENCH_DIR:?the bench module of any build: redis-server runs from there}"
for r in $(seq 1 "$rounds"); do
  for b in "$@"; do
    "${BINS:?}/bench-$b.test" -test.run '^$' -test.bench 'BenchmarkRedis/^impl=(floodgate|redis_rate)$/' \
      -test.benchtime "${BT:-1s}" -test.count 1 -test.benchmem >> "$out-$b.txt" 2>&1
  done
done
