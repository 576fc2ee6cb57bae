#!/usr/bin/env python3
"""usage: ratio.py OUTDIR — floodgate's added time (ns/op less bare's) over
the best peer's (the lower of httprate's and golimiter's added time), per
scenario, for each build: the median over passes of each pass's own ratio
(pass-*.txt), and the ratio of the minimum figures (min-*.txt)."""
import re, statistics, sys, collections
pat = re.compile(r'BenchmarkMiddleware/scenario=(clients-\d+)/impl=(\S+?)-\d+\s+\d+\s+([\d.]+) ns/op')

def passes(path):
    runs, cur = [], None
    for line in open(path):
        if line.startswith('# pass'):
            cur = collections.defaultdict(dict); runs.append(cur); continue
        m = pat.match(line)
        if m and cur is not None:
            cur[m.group(1)][m.group(2)] = float(m.group(3))
    return runs

def ratio(d, impl):
    bare = d['bare']
    return (d[impl] - bare) / (min(d['httprate'], d['golimiter']) - bare)

out = sys.argv[1]
for v in ('before', 'after'):
    per = collections.defaultdict(lambda: collections.defaultdict(list))
    for run in passes(f'{out}/pass-{v}.txt'):
        for sc, d in run.items():
            for impl in ('floodgate', 'floodgate-uncounted'):
                per[sc][impl].append(ratio(d, impl))
    mins = collections.defaultdict(lambda: collections.defaultdict(lambda: float('inf')))
    for line in open(f'{out}/min-{v}.txt'):
        m = pat.match(line)
        if m:
            mins[m.group(1)][m.group(2)] = min(mins[m.group(1)][m.group(2)], float(m.group(3)))
    for sc in sorted(per):
        d = mins[sc]
        print(f"{v:6s} {sc:12s} median of {len(per[sc]['floodgate'])} passes: {statistics.median(per[sc]['floodgate']):.3f}x"
              f" (uncounted {statistics.median(per[sc]['floodgate-uncounted']):.3f}x);"
              f" minima: floodgate {d['floodgate']:.1f}, bare {d['bare']:.1f}, httprate {d['httprate']:.1f},"
              f" golimiter {d['golimiter']:.1f} ns/op: {ratio(d, 'floodgate'):.3f}x")
