import sys, re, statistics, collections
for f in sys.argv[1:]:
    d = collections.defaultdict(list)
    for line in open(f):
        m = re.match(r'BenchmarkRedis/impl=(\S+)/scenario=(\S+)/g=(\d+)-\d+\s.*?([\d.]+) checks/s.*?([\d.]+) server-us/call', line)
        if m:
            d[(m[2], int(m[3]), m[1])].append((float(m[4]), float(m[5])))
    print(f)
    for sc in ("1K-keys", "hotkey"):
        for g in (1, 8, 64):
            a, b = d.get((sc, g, "floodgate"), []), d.get((sc, g, "redis_rate"), [])
            k = min(len(a), len(b))
            if not k: continue
            r = [a[i][0] / b[i][0] for i in range(k)]
            print("  %-8s g=%-3d n=%d ratio median %.3f  [%s]  fg %6.0f/s rr %6.0f/s  server us fg %.2f rr %.2f" % (sc, g, k, statistics.median(r),
                " ".join("%.2f" % x for x in r), statistics.median(x[0] for x in a), statistics.median(x[0] for x in b),
                statistics.median(x[1] for x in a), statistics.median(x[1] for x in b)))
