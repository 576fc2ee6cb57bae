package bench

import (
	"errors"
	"flag"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/loov/hrtime"
)

// Every benchmark name carries scenario= and impl= (and g= for goroutine
// counts), so that `benchstat -col /impl` lays implementations side by side
// and cmd/report can build its tables:
//
//	BenchmarkAllow/scenario=hotkey/impl=floodgate-tb
//	BenchmarkKeys/impl=throttled/scenario=1M-zipf-parallel
//	BenchmarkGoroutines/impl=xtime/scenario=hotkey/g=64
//
// The harness measures and reports; it never asserts speed, and no figure
// stops a run. Calls under Plenty should pass, since a figure is meant to
// measure the grant path: any that do not are reported beside the figure
// as denied/op (see checkDenied). The one thing a run checks is that an
// exhausted key never passes (the denial scenarios): that is a limiter's
// bug, reported as a failed benchmark once the run has gone on to the end.

var goroutinesFlag = flag.String("goroutines", "1,4,64", "comma-separated goroutine counts for BenchmarkGoroutines")

// The implementations each family runs. Every floodgate algorithm and twin
// runs the hot-key scenarios; the key-set scenarios run the token bucket,
// floodgate's default, against the per-key peers.
var (
	// variants are floodgate-tb on the reference registry, with Stats
	// counting, and on a TSC clock.
	variants = ByName("floodgate-tb-xsync", "floodgate-tb-xsync-coarse", "floodgate-tb-stats", "floodgate-tb-stats-coarse", "floodgate-tb-tsc")
	hotImpls = append(append(Floodgates(), variants...), Peers()...)
	// hotFloors run the hot-key scenarios too: a hash and a CAS on one
	// word, with and without a clock read, the least a limiter does there.
	hotFloors = []Impl{FloorCAS, FloorCASClock}
	// parallelImpls leaves out the coarse clock for all but the token
	// bucket: the clock read is the same for every algorithm.
	parallelImpls = append(append(ByName(
		"floodgate-tb", "floodgate-tb-mutex", "floodgate-tb-coarse", "floodgate-tb-mutex-coarse",
		"floodgate-lb", "floodgate-lb-mutex", "floodgate-fw", "floodgate-fw-mutex",
		"floodgate-sc", "floodgate-sc-mutex", "floodgate-sl", "floodgate-sl-mutex"), variants...), Peers()...)
	keyImpls = ByName("floodgate-tb", "floodgate-tb-mutex", "floodgate-tb-coarse",
		"floodgate-tb-xsync", "floodgate-tb-xsync-coarse", "floodgate-tb-tsc",
		"xtime-syncmap", "golimiter", "throttled", "ulule")
	floorImpls = append([]Impl{Floor, FloorCAS, FloorCASClock}, keyImpls...)
	sweepKeys  = []string{"floodgate-tb", "floodgate-tb-coarse", "xtime-syncmap", "golimiter", "throttled"}
	sweepHot   = ByName("floodgate-tb", "floodgate-tb-coarse", "floodgate-sl", "floodgate-sl-mutex", "xtime", "juju", "uber", "golimiter", "throttled")
	// logKeyImpls run the 1K-key scenarios only: the sliding log against
	// its twin where each key's log is small and the keys' states compete
	// for the cache.
	logKeyImpls = ByName("floodgate-sl", "floodgate-sl-mutex")
	latencyHot  = append(slices.Clone(keyImpls), ByName("floodgate-sl", "floodgate-sl-mutex", "xtime", "juju", "uber")...)
	bytesImpls  = ByName("floodgate-lb", "floodgate-fw", "floodgate-sc", "floodgate-sl")
)

// build makes impl for o, or skips the benchmark if impl cannot honour o.
// The timer starts afresh once the limiter is made: a limiter that
// allocates a large table up front (the floors' 36 MB) would otherwise
// have that allocation timed as part of its first sample, which with a
// short -benchtime is the only sample (b.N = 1).
func build(b *testing.B, impl Impl, o Options) Limiter {
	l, release, err := impl.New(o)
	if errors.Is(err, errUnsupported) {
		b.Skipf("%s: %v", impl.Name, err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(release)
	b.ResetTimer()
	return l
}

// BenchmarkAllow runs the scenarios on one key or a few: a hot key from one
// goroutine and from every core, a denial flood on one exhausted key, new
// keys on every call with eviction running, and 1,000 keys under a global
// cap. Under -headline, only headlineAllow's scenarios, for headlineImpls.
func BenchmarkAllow(b *testing.B) {
	run := func(sc string, impls []Impl, f func(b *testing.B, impl Impl)) {
		if headlineCuts(sc, headlineAllow...) {
			return
		}
		for _, impl := range inHeadline(impls) {
			b.Run("scenario="+sc+"/impl="+impl.Name, func(b *testing.B) { f(b, impl) })
		}
	}
	run("hotkey", append(slices.Clone(hotImpls), hotFloors...), func(b *testing.B, impl Impl) {
		benchHot(b, build(b, impl, Options{Rate: Plenty}))
	})
	run("hotkey-parallel", append(slices.Clone(parallelImpls), hotFloors...), func(b *testing.B, impl Impl) {
		benchHotParallel(b, build(b, impl, Options{Rate: Plenty}))
	})
	// Every call is a denial on one exhausted key, from one goroutine and
	// from every core. A denial that writes no shared memory scales with
	// cores: compare the two.
	var deniers []Impl
	for _, impl := range parallelImpls {
		if impl.Denies {
			deniers = append(deniers, impl)
		}
	}
	run("denial", deniers, func(b *testing.B, impl Impl) { benchDenial(b, build(b, impl, Options{Rate: Scarce}), false) })
	run("denial-parallel", deniers, func(b *testing.B, impl Impl) { benchDenial(b, build(b, impl, Options{Rate: Scarce}), true) })
	// Every call is a key never seen before, and idle keys are evicted
	// meanwhile ("churn"), or keys are bounded at 65,536 and each new one
	// takes an old one's place ("churn-bounded": floodgate's MaxKeys,
	// throttled's LRU). Making each key's string costs every
	// implementation one allocation of 16 bytes; floor shows it, and the
	// rest of B/op and allocs/op is what creating a key costs.
	for _, sc := range []struct {
		name string
		o    Options
	}{
		{"churn-parallel", Options{Rate: Plenty, IdleTTL: 100 * time.Millisecond}},
		{"churn-bounded-parallel", Options{Rate: Plenty, MaxKeys: 1 << 16}},
	} {
		run(sc.name, floorImpls, func(b *testing.B, impl Impl) { benchChurn(b, build(b, impl, sc.o)) })
	}
	// 1,000 keys and a global cap that is asked on every grant: every
	// request also writes one shared word.
	run("globalcap-parallel", keyImpls, func(b *testing.B, impl Impl) {
		global := Plenty
		l := build(b, impl, Options{Rate: Plenty, Global: &global})
		ks := keySet(1000)
		benchPicks(b, l, ks, picks(len(ks), "uniform"), true)
	})
}

// hot calls Allow on one key, from one goroutine or from every core, and
// returns how many of its calls were refused, and how many it made.
func hot(b *testing.B, l Limiter, parallel bool) (refused int64, calls int) {
	l.Allow("hot")
	b.ReportAllocs()
	if !parallel {
		for b.Loop() {
			if !l.Allow("hot") {
				refused++
			}
		}
		return refused, b.N
	}
	// Each goroutine counts on its own and adds once: in the denial
	// scenario every call is refused, and a shared counter written on
	// every call would time the counter's cache line, not the limiter.
	var n atomic.Int64
	b.ResetTimer() // as b.Loop does: the limiter's making is not the figure
	b.RunParallel(func(pb *testing.PB) {
		refused := int64(0)
		for pb.Next() {
			if !l.Allow("hot") {
				refused++
			}
		}
		n.Add(refused)
	})
	return n.Load(), b.N
}

// benchHot is the hot-key scenario under Plenty: every call should pass.
func benchHot(b *testing.B, l Limiter) {
	refused, calls := hot(b, l, false)
	checkDenied(b, refused, calls)
}

// benchHotParallel is benchHot from every core.
func benchHotParallel(b *testing.B, l Limiter) {
	refused, calls := hot(b, l, true)
	checkDenied(b, refused, calls)
}

// benchDenial is the hot-key scenario on a key that Scarce has exhausted
// after its first call: every call must be refused.
func benchDenial(b *testing.B, l Limiter, parallel bool) {
	refused, calls := hot(b, l, parallel)
	checkPassed(b, int64(calls)-refused, calls)
}

// checkPassed fails a denial scenario in which an exhausted key passed:
// the limiter admitted more than its rule, a bug and not a figure. The
// benchmark is marked failed, its figure stands beside passed/op, and the
// run goes on.
func checkPassed(b *testing.B, passed int64, calls int) {
	if passed > 0 {
		b.ReportMetric(float64(passed)/float64(calls), "passed/op")
		b.Errorf("an exhausted key passed %d of %d calls: the limiter admitted more than its rule", passed, calls)
	}
}

// benchChurn calls Allow from every core, each call with a key never seen
// before.
func benchChurn(b *testing.B, l Limiter) {
	var worker atomic.Int64
	var denied atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := strconv.AppendInt([]byte("churn-"), worker.Add(1), 10)
		buf = append(buf, '-')
		prefix := len(buf)
		for i := uint64(0); pb.Next(); i++ {
			buf = strconv.AppendUint(buf[:prefix], i, 10)
			if !l.Allow(string(buf)) {
				denied.Add(1)
			}
		}
	})
	checkDenied(b, denied.Load(), b.N)
}

// keyCounts are the key-set sizes, with the names used in scenario=.
var keyCounts = []struct {
	name string
	n    int
}{{"1K", 1_000}, {"100K", 100_000}, {"1M", 1_000_000}}

// BenchmarkKeys calls Allow on keys that all exist before the timer starts,
// chosen uniformly or by Zipf(s=1.1), from one goroutine ("-1") and from
// every core ("-parallel"). Each implementation holds one key set at a
// time, so that no other implementation's heap burdens its garbage
// collector (the testing package collects before every run). Filling 1M
// keys is the slowest step of make bench, so the 1M-key limiter also
// serves, under names of their own that cmd/report files in their tables:
//
//	scenario=1M-bytes           the heap it holds per key (B/key)
//	scenario=1M-uniform-latency latency percentiles under parallel load
//	scenario=1M-uniform/g=N     throughput with N goroutines
//
// The sliding log and its twin run the 1K-key set alone, after the rest.
// Under -headline, each key set runs only N-uniform-parallel, and 1M
// 1M-bytes too, for headlineImpls, and the sliding log not at all.
func BenchmarkKeys(b *testing.B) {
	counts := parseCounts(b, *goroutinesFlag)
	for _, impl := range inHeadline(floorImpls) {
		b.Run("impl="+impl.Name, func(b *testing.B) {
			for _, kc := range keyCounts {
				ks := keySet(kc.n)
				perKey, l, release := filled(b, impl, ks)
				if kc.n == 1_000_000 && !strings.HasPrefix(impl.Name, Floor.Name) {
					b.Run("scenario=1M-bytes", func(b *testing.B) {
						for b.Loop() {
						}
						b.ReportMetric(perKey, "B/key")
					})
				}
				benchDists(b, l, kc.name, ks)
				if kc.n == 1_000_000 && !headline() {
					seq := picks(kc.n, "uniform")
					b.Run("scenario=1M-uniform-latency", func(b *testing.B) { benchLatency(b, l, ks, seq) })
					if slices.Contains(sweepKeys, impl.Name) {
						for _, g := range counts {
							b.Run("scenario=1M-uniform/g="+strconv.Itoa(g), func(b *testing.B) { benchGoroutines(b, g, l, ks, seq) })
						}
					}
				}
				release()
			}
		})
	}
	for _, impl := range logKeyImpls {
		if headline() {
			break
		}
		b.Run("impl="+impl.Name, func(b *testing.B) {
			kc := keyCounts[0]
			ks := keySet(kc.n)
			_, l, release := filled(b, impl, ks)
			defer release()
			benchDists(b, l, kc.name, ks)
		})
	}
}

// benchDists runs the key-set scenarios on l, which holds ks: keys picked
// uniformly and by Zipf, from one goroutine and from every core (under
// -headline, uniformly from every core only).
func benchDists(b *testing.B, l Limiter, name string, ks []string) {
	for _, dist := range []string{"uniform", "zipf"} {
		if headlineCuts(dist, "uniform") {
			continue
		}
		seq := picks(len(ks), dist)
		if !headline() {
			b.Run("scenario="+name+"-"+dist+"-1", func(b *testing.B) { benchPicks(b, l, ks, seq, false) })
		}
		b.Run("scenario="+name+"-"+dist+"-parallel", func(b *testing.B) { benchPicks(b, l, ks, seq, true) })
	}
}

// filled builds impl and requests every key once, each with a copy of the
// key's string, as a server makes it from a request: the limiter keeps its
// own copy, and a later lookup with ks[i] compares against it (touching the
// stored bytes, as a real lookup does) instead of finding the very same
// pointer. It returns the live heap the limiter holds per key, its copies
// of the keys included.
func filled(b *testing.B, impl Impl, ks []string) (perKey float64, l Limiter, release func()) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l, release, err := impl.New(Options{Rate: Plenty})
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range ks {
		l.Allow(strings.Clone(k))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(ks))
	return perKey, l, release
}

// benchPicks calls Allow on ks[seq[i]] for successive i, from one
// goroutine or from GOMAXPROCS goroutines, each from its own random
// starting point.
func benchPicks(b *testing.B, l Limiter, ks []string, seq []uint32, parallel bool) {
	if parallel {
		var denied atomic.Int64
		calls := timed(b, runtime.GOMAXPROCS(0), picker(l, ks, seq, 0, &denied))
		checkDenied(b, denied.Load(), calls)
		return
	}
	mask := len(seq) - 1
	b.ReportAllocs()
	i, denied := rand.IntN(len(seq)), int64(0)
	for b.Loop() {
		if !l.Allow(ks[seq[i&mask]]) {
			denied++
		}
		i++
	}
	checkDenied(b, denied, b.N)
}

// checkDenied reports the calls that Plenty refused, as denied/op beside
// the benchmark's figure. Plenty is chosen to refuse nothing at any speed
// a machine can reach (see Plenty), but a scenario may still see a few
// denials (the sliding counter refuses, by design, a reading from a window
// its key has already left, which a goroutine preempted across a window
// boundary can bring), or many, on a machine faster than any we know of.
// Its figure then measured some denials among the grants, and says how
// many; the run goes on, since make bench must finish and write results/
// on any machine. cmd/report lists every such figure.
func checkDenied(b *testing.B, denied int64, calls int) {
	if denied > 0 && calls > 0 {
		b.ReportMetric(float64(denied)/float64(calls), "denied/op")
	}
}

// timed runs g goroutines of work for the benchmark time, once, and
// reports wall time, allocations and bytes per call. It is RunParallel
// without the calibration runs: the testing package collects garbage
// before each run, and with a 1M-key limiter alive each collection costs
// more than the run, so one timed run instead of four or five is what
// keeps the key sets' runs short. Each worker returns its call count;
// timed returns their sum.
func timed(b *testing.B, g int, work func(stop *atomic.Bool) int) (calls int) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	total, elapsed := runFor(g, benchTime(), work)
	b.StopTimer()
	runtime.ReadMemStats(&after)
	n := float64(total)
	b.ReportMetric(float64(elapsed.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/op")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/op")
	return int(total)
}

// benchTime is -test.benchtime as a duration, or make bench's 100 ms if
// it is a count: a timed run has no iterations to count, and a count
// (make bench-smoke's 1x) asks for the quickest run, which a second, as
// this once was, is not.
func benchTime() time.Duration {
	if f := flag.Lookup("test.benchtime"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil {
			return d
		}
	}
	return 100 * time.Millisecond
}

// BenchmarkLatency records the duration of calls on one hot key under
// parallel load; BenchmarkKeys does the same at 1M keys.
func BenchmarkLatency(b *testing.B) {
	for _, impl := range latencyHot {
		b.Run("impl="+impl.Name+"/scenario=hotkey-parallel", func(b *testing.B) {
			l := build(b, impl, Options{Rate: Plenty})
			benchLatency(b, l, []string{"hot"}, []uint32{0})
		})
	}
}

// benchLatency records the duration of every call from GOMAXPROCS
// goroutines (in a ring of the latest samples per goroutine) with the
// samples' clock (see stamp), and reports its percentiles. Each sample
// includes one clock read, the same for every implementation.
func benchLatency(b *testing.B, l Limiter, ks []string, seq []uint32) {
	const ring = 1 << 16
	var (
		mu      sync.Mutex
		samples []stamp
	)
	calibrateStamps()
	mask := len(seq) - 1
	g := runtime.GOMAXPROCS(0)
	var denied atomic.Int64
	// The rings are made and written before the timed run: a page's first
	// write faults, and 128 faults per ring would otherwise sit in p99.9.
	rings := make(chan []stamp, g)
	for range g {
		r := make([]stamp, ring)
		for i := range r {
			r[i] = 1
		}
		rings <- r
	}
	calls := timed(b, g, func(stop *atomic.Bool) int {
		mine := <-rings
		i, n := rand.IntN(len(seq)), 0
		for !stop.Load() {
			for range 64 {
				k := ks[seq[i&mask]]
				start := stampNow()
				ok := l.Allow(k)
				mine[n&(ring-1)] = start.since()
				if !ok {
					denied.Add(1)
				}
				i++
				n++
			}
		}
		mu.Lock()
		samples = append(samples, mine[:min(n, ring)]...)
		mu.Unlock()
		return n
	})
	checkDenied(b, denied.Load(), calls)
	durations := make([]time.Duration, len(samples))
	for i, c := range samples {
		durations[i] = c.duration()
	}
	h := hrtime.NewDurationHistogram(durations, &hrtime.HistogramOptions{BinCount: 1})
	b.ReportMetric(h.P50, "p50-ns")
	b.ReportMetric(h.P99, "p99-ns")
	b.ReportMetric(h.P999, "p99.9-ns")
}

// BenchmarkGoroutines runs a fixed number of goroutines, each taking an
// equal share of the calls, on one hot key (BenchmarkKeys does the same at
// 1M keys): its ns/op is wall time per call, the inverse of throughput.
// The counts come from -goroutines (make bench-full runs 1, 4 and 64,
// and the long run on a many-core machine passes 1,2,4,8,16,64).
func BenchmarkGoroutines(b *testing.B) {
	counts := parseCounts(b, *goroutinesFlag)
	for _, impl := range sweepHot {
		b.Run("impl="+impl.Name+"/scenario=hotkey", func(b *testing.B) {
			l := build(b, impl, Options{Rate: Plenty})
			l.Allow("hot")
			for _, g := range counts {
				b.Run("g="+strconv.Itoa(g), func(b *testing.B) {
					benchGoroutines(b, g, l, []string{"hot"}, []uint32{0})
				})
			}
		})
	}
}

// pairedRounds is how many rounds BenchmarkPaired interleaves in one run,
// each limiter running a tenth of -benchtime per round.
const pairedRounds = 10

// pairedPause is the mean pause, in steps of Slice's busy loop (a few ns
// each), that the paused scenarios of BenchmarkPaired take after each
// call: GOMAXPROCS goroutines whose calls now collide and now do not, as
// a service's handlers do between their work.
const pairedPause = 32

// BenchmarkPaired runs the sliding log in the scenarios where issues 12
// and 24 set it targets, interleaved with the limiter it is held against (its
// mutex twin, or the token bucket in hotkey-1-tb): slices of a tenth of
// -benchtime each, in turn, for pairedRounds rounds (see Interleave). On
// a shared machine two figures taken seconds apart can differ by more
// than the gap being measured; slices taken side by side share the
// machine's state. Each pair reports two results, one per impl=, whose
// ns/op is the median of its slices; the sliding log's also carries
// "ratio", the median over rounds of its slice ÷ the other's, which
// cmd/report shows beside the two.
func BenchmarkPaired(b *testing.B) {
	sl, twin, tb := ByName("floodgate-sl")[0], ByName("floodgate-sl-mutex")[0], ByName("floodgate-tb")[0]
	procs := runtime.GOMAXPROCS(0)
	for _, sc := range []struct {
		name  string
		keys  int
		dist  string
		g     int
		pause int
		other Impl
	}{
		{"hotkey-1", 1, "uniform", 1, 0, twin},
		{"hotkey-parallel", 1, "uniform", procs, 0, twin},
		{"hotkey-64", 1, "uniform", 64, 0, twin},
		{"hotkey-paused", 1, "uniform", procs, pairedPause, twin},
		{"1K-uniform-1", 1000, "uniform", 1, 0, twin},
		{"1K-uniform-parallel", 1000, "uniform", procs, 0, twin},
		{"1K-zipf-1", 1000, "zipf", 1, 0, twin},
		{"1K-zipf-parallel", 1000, "zipf", procs, 0, twin},
		{"1K-zipf-paused", 1000, "zipf", procs, pairedPause, twin},
		{"hotkey-1-tb", 1, "uniform", 1, 0, tb},
	} {
		b.Run("scenario="+sc.name, func(b *testing.B) {
			impls := []Impl{sl, sc.other}
			var res *Interleaved
			measure := func(b *testing.B) Interleaved {
				if res != nil {
					return *res
				}
				ks := keySet(sc.keys)
				ls := make([]Limiter, len(impls))
				for i, impl := range impls {
					ls[i] = build(b, impl, Options{Rate: Plenty})
					for _, k := range ks {
						ls[i].Allow(strings.Clone(k))
					}
				}
				r := Interleave(ls, ks, picks(sc.keys, sc.dist), sc.g, sc.pause, pairedRounds, benchTime()/10)
				res = &r
				return r
			}
			for i, impl := range impls {
				b.Run("impl="+impl.Name, func(b *testing.B) {
					r := measure(b)
					for b.Loop() {
					}
					b.ReportMetric(r.Ns[i], "ns/op")
					if r.Denied[i] > 0 {
						b.ReportMetric(r.Denied[i], "denied/op")
					}
					if i == 0 {
						b.ReportMetric(r.Ratio[0], "ratio")
					}
				})
			}
		})
	}
}

func benchGoroutines(b *testing.B, g int, l Limiter, ks []string, seq []uint32) {
	var denied atomic.Int64
	calls := timed(b, g, picker(l, ks, seq, 0, &denied))
	checkDenied(b, denied.Load(), calls)
}

func parseCounts(b *testing.B, s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("-goroutines: %q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkBytesPerKey reports the heap held per key at 1M keys by the
// floodgate algorithms that BenchmarkKeys does not run (it reports the
// token bucket and the peers as scenario=1M-bytes).
func BenchmarkBytesPerKey(b *testing.B) {
	for _, impl := range bytesImpls {
		b.Run("impl="+impl.Name+"/scenario=1M", func(b *testing.B) {
			perKey, l, release := filled(b, impl, keySet(1_000_000))
			runtime.KeepAlive(l)
			release()
			for b.Loop() {
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

// keySet returns n distinct keys, "client-0" and on. It is made afresh
// for each use, so that no key set outlives the benchmark that needs it,
// and the keys are slices of one string, so that the garbage collector
// (which the testing package runs before every measurement) finds one
// object where there would be n.
func keySet(n int) []string {
	var buf []byte
	ends := make([]int, n)
	for i := range n {
		buf = strconv.AppendInt(append(buf, "client-"...), int64(i), 10)
		ends[i] = len(buf)
	}
	all := string(buf)
	ks := make([]string, n)
	start := 0
	for i, end := range ends {
		ks[i] = all[start:end]
		start = end
	}
	return ks
}

// pickSeqs caches pick sequences (pointer-free, so they cost the garbage
// collector nothing), string → []uint32.
var pickSeqs sync.Map

// BenchmarkDependentLoad chases pointers through a random cycle over 1M
// 64-byte nodes (64 MB, like a limiter's state at 1M keys): its ns/op is
// the latency of one cache miss that depends on the one before, the unit
// in which the key-set scenarios are paid. It has no impl= and stays out
// of the summary.
func BenchmarkDependentLoad(b *testing.B) {
	type node struct {
		next *node
		_    [56]byte
	}
	const n = 1 << 20
	nodes := make([]node, n)
	perm := rand.New(rand.NewPCG(1, 2)).Perm(n)
	for i := range n {
		nodes[perm[i]].next = &nodes[perm[(i+1)%n]]
	}
	p := &nodes[perm[0]]
	b.Run("scenario=1M-nodes", func(b *testing.B) {
		for b.Loop() {
			p = p.next
		}
	})
	runtime.KeepAlive(p)
}

// BenchmarkClockRead times one reading of each clock floodgate offers, on
// its own: the share of a hot-key Allow that is the clock's.
func BenchmarkClockRead(b *testing.B) {
	coarse := floodgate.NewCoarseClock(CoarseResolution)
	defer coarse.Stop()
	tsc := floodgate.NewTSCClock()
	defer tsc.Stop()
	for _, c := range []struct {
		name  string
		clock floodgate.Clock
	}{{"system", floodgate.SystemClock()}, {"coarse", coarse}, {"tsc", tsc}} {
		b.Run("scenario=read/impl="+c.name, func(b *testing.B) {
			var sum int64
			for b.Loop() {
				sum += c.clock.Now()
			}
			runtime.KeepAlive(sum)
		})
	}
}

// picks returns Picks(n, dist), made once per process and before any
// timer starts.
func picks(n int, dist string) []uint32 {
	id := dist + "/" + strconv.Itoa(n)
	if v, ok := pickSeqs.Load(id); ok {
		return v.([]uint32)
	}
	v, _ := pickSeqs.LoadOrStore(id, Picks(n, dist))
	return v.([]uint32)
}
