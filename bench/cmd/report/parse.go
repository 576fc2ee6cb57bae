package main

import (
	"bufio"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Units the report reads.
const (
	unitNs     = "ns/op"
	unitBKey   = "B/key"
	unitRatio  = "ratio"
	unitP50    = "p50-ns"
	unitP99    = "p99-ns"
	unitServer = "server-us/call"
	unitP999   = "p99.9-ns"
	unitRT     = "rt/check"
	unitScript = "scripts/check"
	unitLocal  = "p99-local-ns"
	unitDenied = "denied/op"
	unitRTReq  = "rt/req"
	unitCmds   = "cmds/req"
	unitMCCmds = "mc-cmds/req"
	unitMCCPU  = "memcached-cpu-ns/req"
	unitScrReq = "scripts/req"
	unitSrvCPU = "server-cpu-ns/req"
	unitOwnCPU = "own-cpu-ns/req"
	unitRPCCPU = "grpc-cpu-ns/req"
	unitIdle   = "idle-cpu-%"
	unitAdded  = "goroutines-added"
	unitBRule  = "heap-B/rule"
	unitRSS    = "rss-MB"

	unitP99Quiet  = "p99-quiet-ns"
	unitP99Pushes = "p99-pushes-ns"
	unitP99Ratio  = "p99-ratio"
	unitPlainNs   = "plain-ns/req"
	unitTLSNs     = "tls-ns/req"
	unitTLSLoss   = "tls-rps-loss-%"
	floodgate     = "floodgate-"
)

// perKeyPeers are the peers that keep a limit per key: the "best per-key
// peer" columns compare floodgate with the fastest (or smallest) of them.
var perKeyPeers = []string{"xtime-syncmap", "golimiter", "throttled", "ulule"}

// redisMiddlewarePeers are the peers' middlewares on Redis: the "best
// Redis-backed peer" column compares each middleware with the fastest of
// them.
var redisMiddlewarePeers = []string{"ulule-redis", "throttled-redis"}

// redisScenario begins the name of BenchmarkMiddleware's scenarios on
// Redis, which have a table of their own.
const redisScenario = "redis-"

// floorImpl is the harness without a limiter: shown beside floodgate, never
// compared as a peer.
const floorImpl = "floor"

// benchKey identifies a benchmark by the components the report groups on.
type benchKey struct {
	family   string // the part before the first slash, e.g. "Allow"
	scenario string
	impl     string
	g        int    // goroutines, from g=; 0 when absent
	op       string // the operation, from op= (BenchmarkCharge); "" when absent
}

// dataset is everything read from one raw benchmark file.
type dataset struct {
	meta    map[string]string                 // header values: date, machine, go, cpu, …
	order   []benchKey                        // benchmarks in order of first appearance
	samples map[benchKey]map[string][]float64 // unit → one value per result line
	lines   map[benchKey]int                  // result lines (samples) per benchmark
}

// newDataset returns an empty dataset.
func newDataset() *dataset {
	return &dataset{
		meta:    map[string]string{},
		samples: map[benchKey]map[string][]float64{},
		lines:   map[benchKey]int{},
	}
}

// parse reads Go benchmark output. Lines it does not understand are
// skipped; the only errors are read errors.
func parse(r io.Reader) (*dataset, error) {
	d := newDataset()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		d.addLine(sc.Text())
	}
	return d, sc.Err()
}

// addLine reads one line of output: a comment, a result or a header.
func (d *dataset) addLine(line string) {
	line = strings.TrimSpace(line)
	switch {
	case strings.HasPrefix(line, "#"):
		d.addHeader(strings.TrimSpace(strings.TrimPrefix(line, "#")))
	case strings.HasPrefix(line, "Benchmark"):
		d.addResult(line)
	default:
		if k, _, _ := strings.Cut(line, ":"); goHeaders[k] {
			d.addHeader(line)
		}
	}
}

// goHeaders are the "key: value" lines go test prints before results.
var goHeaders = map[string]bool{"goos": true, "goarch": true, "pkg": true, "cpu": true}

// addHeader records a "key: value" header line, such as "cpu: …" or (from
// a comment) "machine: …". The first value of a key wins.
func (d *dataset) addHeader(line string) {
	k, v, ok := strings.Cut(line, ":")
	if !ok || k == "" || strings.ContainsAny(k, " \t") {
		return
	}
	if _, seen := d.meta[k]; !seen {
		d.meta[k] = strings.TrimSpace(v)
	}
}

// addResult records a result line's metrics as one more sample of its
// benchmark, if the line and the benchmark's name are ones the report reads.
func (d *dataset) addResult(line string) {
	name, metrics, ok := parseResult(line)
	if !ok {
		return
	}
	k, ok := parseName(stripProcs(strings.TrimPrefix(name, "Benchmark")))
	if !ok {
		return
	}
	if d.lines[k] == 0 {
		d.order = append(d.order, k)
		d.samples[k] = map[string][]float64{}
	}
	d.lines[k]++
	for unit, v := range metrics {
		d.samples[k][unit] = append(d.samples[k][unit], v)
	}
}

// parseResult splits a result line: the name, the iteration count, then
// pairs of value and unit.
func parseResult(line string) (name string, metrics map[string]float64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return "", nil, false
	}
	if n, err := strconv.ParseInt(f[1], 10, 64); err != nil || n < 0 {
		return "", nil, false
	}
	metrics = make(map[string]float64, len(f)/2-1)
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return "", nil, false
		}
		metrics[f[i+1]] = v
	}
	return f[0], metrics, true
}

// stripProcs removes the "-N" GOMAXPROCS suffix that go test appends to a
// benchmark's name. It never writes "-1" (at GOMAXPROCS=1 it appends
// nothing), so a trailing "-1" is part of the name and stays.
func stripProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || !allDigits(name[i+1:]) {
		return name
	}
	if n, err := strconv.Atoi(name[i+1:]); err != nil || n < 2 {
		return name
	}
	return name[:i]
}

// allDigits reports whether s is a non-empty run of ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseName splits a name without its "Benchmark" prefix and procs suffix,
// such as "Allow/scenario=hotkey/impl=floodgate-tb", in any order of its
// components. It rejects names without impl= and names with components
// other than scenario=, impl=, g= and op= (such as the root package's
// alg=).
func parseName(name string) (benchKey, bool) {
	parts := strings.Split(name, "/")
	k := benchKey{family: parts[0]}
	if len(parts) < 2 || k.family == "" {
		return k, false
	}
	for _, p := range parts[1:] {
		key, val, ok := strings.Cut(p, "=")
		if !ok {
			return k, false
		}
		switch key {
		case "scenario":
			k.scenario = val
		case "impl":
			k.impl = val
		case "g":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return k, false
			}
			k.g = n
		case "op":
			k.op = val
		default:
			return k, false
		}
	}
	return regroup(k), k.impl != ""
}

// regroup files the benchmarks that the harness runs inside BenchmarkKeys,
// to share one filled 1M-key limiter, under the family whose table they
// belong to: "…/g=N" under Goroutines, "scenario=X-latency" under Latency
// as "X-parallel", and "scenario=X-bytes" under BytesPerKey as "X".
func regroup(k benchKey) benchKey {
	if k.family != "Keys" {
		return k
	}
	switch {
	case k.g > 0:
		k.family = "Goroutines"
	case strings.HasSuffix(k.scenario, "-latency"):
		k.family, k.scenario = "Latency", strings.TrimSuffix(k.scenario, "-latency")+"-parallel"
	case strings.HasSuffix(k.scenario, "-bytes"):
		k.family, k.scenario = "BytesPerKey", strings.TrimSuffix(k.scenario, "-bytes")
	}
	return k
}

// median returns the median of xs, which must not be empty.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// value returns the median of a benchmark's samples of unit.
func (d *dataset) value(k benchKey, unit string) (float64, bool) {
	xs := d.samples[k][unit]
	if len(xs) == 0 {
		return 0, false
	}
	return median(xs), true
}

// ns returns the median ns/op of a benchmark without g=.
func (d *dataset) ns(family, scenario, impl string) (float64, bool) {
	return d.value(benchKey{family: family, scenario: scenario, impl: impl}, unitNs)
}

// sampleCount returns the most common number of samples per benchmark
// (the larger on a tie).
func (d *dataset) sampleCount() int {
	freq := map[int]int{}
	for _, n := range d.lines {
		freq[n]++
	}
	best := 0
	for n, c := range freq {
		if c > freq[best] || c == freq[best] && n > best {
			best = n
		}
	}
	return best
}

// scenarios returns the scenarios of a family in order of first appearance.
func (d *dataset) scenarios(family string) []string {
	var out []string
	for _, k := range d.order {
		if k.family == family && !slices.Contains(out, k.scenario) {
			out = append(out, k.scenario)
		}
	}
	return out
}

// impls returns the implementations of the benchmarks that keep selects
// and that have samples of unit: floodgate's first, each group in order of
// first appearance.
func (d *dataset) impls(keep func(benchKey) bool, unit string) []string {
	var out []string
	for _, k := range d.order {
		if keep(k) && len(d.samples[k][unit]) > 0 && !slices.Contains(out, k.impl) {
			out = append(out, k.impl)
		}
	}
	return oursFirst(out)
}

// goroutines returns the g values of a family's scenario, ascending.
func (d *dataset) goroutines(family, scenario string) []int {
	var out []int
	for _, k := range d.order {
		if k.family == family && k.scenario == scenario && k.g > 0 && !slices.Contains(out, k.g) {
			out = append(out, k.g)
		}
	}
	slices.Sort(out)
	return out
}

// oursFirst stably moves floodgate's implementations to the front.
func oursFirst(impls []string) []string {
	slices.SortStableFunc(impls, func(a, b string) int {
		switch {
		case isOurs(a) == isOurs(b):
			return 0
		case isOurs(a):
			return -1
		default:
			return 1
		}
	})
	return impls
}

// isOurs reports whether impl is one of floodgate's implementations.
func isOurs(impl string) bool { return strings.HasPrefix(impl, floodgate) }

// bestPerKeyPeer returns the per-key peer with the smallest value of unit
// among the benchmarks k with k.impl set to each peer in turn.
func (d *dataset) bestPerKeyPeer(k benchKey, unit string) (name string, v float64, ok bool) {
	for _, p := range perKeyPeers {
		k.impl = p
		if pv, found := d.value(k, unit); found && (!ok || pv < v) {
			name, v, ok = p, pv, true
		}
	}
	return name, v, ok
}
