package stress

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/reference"
	"github.com/floodgate-go/floodgate/internal/shardlog"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/floodgate-go/floodgate/internal/testmain"
)

var long = flag.Bool("long", false, "run for minutes instead of seconds")

// size is a test's count of attempts or rounds, n in the full run (make
// check): twenty times n under -long, for minutes on a many-core runner; a
// fifth of it under -short, for make test-arm64's run under emulation
// (where each instruction costs tens of native ones); and a twentieth in
// the quick form that make test runs (testmain.Quick).
func size(n int) int {
	switch {
	case *long:
		return 20 * n
	case testing.Short():
		return max(1, n/5)
	case quick():
		return max(1, n/20)
	}
	return n
}

// demand is size(n) attempts, but never fewer than twice supply, what the
// test's rule can grant in all: every form of every test asks for at least
// twice what it may admit, so that an admission above the rule has the
// demand to show.
func demand(n, supply int) int { return max(size(n), 2*supply) }

// perRound is the attempts in one round of a test that counts its rounds
// with size: n, and in the quick form a twentieth of n but never fewer
// than twice supply.
func perRound(n, supply int) int {
	if quick() {
		return max(n/20, 2*supply)
	}
	return n
}

// quick reports whether the run is the quick form: make test's, and
// neither -long nor -short.
func quick() bool { return testmain.Quick() && !*long && !testing.Short() }

const goroutines = 64

// family says which invariant an algorithm keeps.
type family int

const (
	bucket  family = iota // token and leaky bucket: B + Limit × elapsed / Period
	fixed                 // at most N per window
	sliding               // prev × (T − e) / T + curr ≤ N
	logged                // at most N in any (x − T, x], by charged time
)

type algorithm struct {
	name      string
	family    family
	lockFree  bool
	reference bool // the reference limiter (xsync maps) instead of the Limiter
}

// algorithms is every algorithm and twin, in a Limiter and again in the
// reference limiter.
var algorithms = onBoth([]algorithm{
	{floodgate.TokenBucket, bucket, true, false},
	{testhook.TokenBucketMutex, bucket, false, false},
	{floodgate.LeakyBucket, bucket, true, false},
	{testhook.LeakyBucketMutex, bucket, false, false},
	{floodgate.FixedWindow, fixed, true, false},
	{testhook.FixedWindowMutex, fixed, false, false},
	{floodgate.SlidingCounter, sliding, true, false},
	{testhook.SlidingCounterMutex, sliding, false, false},
	{floodgate.SlidingLog, logged, true, false},
	{testhook.SlidingLogMutex, logged, false, false},
})

func onBoth(as []algorithm) []algorithm {
	out := slices.Clone(as)
	for _, a := range as {
		a.reference = true
		out = append(out, a)
	}
	return out
}

func (a algorithm) String() string {
	if a.reference {
		return a.name + "/xsync"
	}
	return a.name
}

// forEach runs f for every algorithm and its mutex twin, with GOMAXPROCS
// raised above the cores. Under the chaos tag it fails a lock-free run in
// which no CAS ever lost a race: such a run proves nothing.
func forEach(t *testing.T, f func(t *testing.T, a algorithm)) {
	old := runtime.GOMAXPROCS(max(8, 4*runtime.NumCPU()))
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			before, claims := chaos.Retries(), chaos.RetriesAt("log.claim")
			f(t, a)
			if a.lockFree && (a.family != logged || shardlog.LockFree()) {
				retries := chaos.Retries() - before
				// On two busy cores, under the race detector, a run can
				// end with no goroutine ever preempted inside a CAS loop.
				// Such a run is run again, a few times, before failing:
				// each run that passes is still checked in full.
				for again := 0; chaos.Enabled && retries == 0 && again < contendTries; again++ {
					t.Logf("no CAS retried: running again (%d of %d)", again+1, contendTries)
					f(t, a)
					retries = chaos.Retries() - before
				}
				if chaos.Enabled && retries == 0 {
					t.Fatal("no CAS ever retried: the test did not contend, so it proves nothing")
				}
				t.Logf("CAS retries: %d (counted only with -tags chaos)", retries)
			}
			if a.lockFree && a.family == logged && shardlog.LockFree() {
				// The sliding log's one-entry claim has a retry of its own.
				lost := chaos.RetriesAt("log.claim") - claims
				t.Logf("of which the log's one-entry claim: %d", lost)
			}
		})
	}
}

// contendTries is how many more times forEach runs a lock-free test
// whose run saw no CAS retried, before it fails it.
const contendTries = 4

// limiter is what the Limiter and the reference limiter both offer.
type limiter interface {
	Allow(key string) bool
	AllowN(key string, n int64) floodgate.Decision
	AllowAt(key string, now, n int64) floodgate.Decision
	Peek(key string) floodgate.Decision
	EvictIdle() int
	Len() int
	Close() error
}

// mustNew builds a's limiter: the Limiter, or the reference limiter.
func mustNew(t *testing.T, a algorithm, cfg floodgate.Config) limiter {
	t.Helper()
	var l limiter
	var err error
	if a.reference {
		l, err = reference.New(cfg)
	} else {
		l, err = floodgate.New(testhook.Twins(cfg).(floodgate.Config))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// mustLimiter builds a's Limiter, for what only the Limiter has.
func mustLimiter(t *testing.T, a algorithm, cfg floodgate.Config) *floodgate.Limiter {
	t.Helper()
	if a.reference {
		t.Fatal("the reference limiter has no MaxKeys or SetRule: skip it")
	}
	return mustNew(t, a, cfg).(*floodgate.Limiter)
}

// hammer runs goroutines that together make attempts calls of try, and
// returns when all are done. They start together, so that the first to
// start does not take everything before the others contend.
func hammer(attempts int, try func(r *rand.Rand)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	per := (attempts + goroutines - 1) / goroutines
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			<-start
			for range per {
				try(r)
			}
		}()
	}
	close(start)
	wg.Wait()
}

func TestFrozenClockOneKey(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		// Windows take Burst 0 only; their second rule gives 65,536 grants
		// to contend on, as the buckets' largest burst does, so that the
		// chaos build's retry check cannot pass or fail on a handful of
		// grants. The quick form, which has no chaos build, contends on
		// 8,192: under the race detector a log of 65,536 entries costs
		// seconds in the detector's own bookkeeping.
		large := int64(65536)
		if quick() {
			large = 8192
		}
		rules := []floodgate.Rule{{Limit: 1000, Period: time.Second}, {Limit: large, Period: time.Second}}
		if a.family == bucket {
			rules = []floodgate.Rule{
				{Limit: 1000, Period: time.Second, Burst: 1},
				{Limit: 1000, Period: time.Second, Burst: 1000},
				{Limit: 1000, Period: time.Second, Burst: large},
			}
		}
		for _, rule := range rules {
			l := mustNew(t, a, floodgate.Config{Algorithm: a.name, Rule: rule, Clock: floodgate.NewManualClock(12345)})
			var admitted atomic.Int64
			hammer(demand(1_000_000, int(rule.Capacity())), func(*rand.Rand) {
				if l.Allow("hot") {
					admitted.Add(1)
				}
			})
			if got := admitted.Load(); got != rule.Capacity() {
				t.Fatalf("%+v: admitted %d of 1M attempts on one key, want exactly %d", rule, got, rule.Capacity())
			}
		}
	})
}

// TestFrozenClockWeighted: costs of 1 to 7 on one key; the admitted cost
// totals exactly the capacity once not even a cost of 1 fits.
func TestFrozenClockWeighted(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		const limit = 10_000
		l := mustNew(t, a, floodgate.Config{Algorithm: a.name, Rule: floodgate.Rule{Limit: limit, Period: time.Second}, Clock: floodgate.NewManualClock(0)})
		var cost atomic.Int64
		// Costs average 4: the supply is limit/4 requests.
		hammer(demand(500_000, limit/4), func(r *rand.Rand) {
			n := 1 + r.Int64N(7)
			if l.AllowN("w", n).Allowed {
				cost.Add(n)
			}
		})
		if got := cost.Load(); got != limit {
			t.Fatalf("admitted cost %d, want exactly %d", got, limit)
		}
	})
}

func TestFrozenClockThousandKeys(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		const keys, limit = 1000, 100
		l := mustNew(t, a, floodgate.Config{Algorithm: a.name, Rule: floodgate.Rule{Limit: limit, Period: time.Second}, Clock: floodgate.NewManualClock(0)})
		names := keyNames(keys)
		var admitted [keys]atomic.Int64
		hammer(demand(1_000_000, keys*limit), func(r *rand.Rand) {
			k := r.IntN(keys)
			if l.Allow(names[k]) {
				admitted[k].Add(1)
			}
		})
		for k := range admitted {
			if got := admitted[k].Load(); got != limit {
				t.Fatalf("key %d admitted %d, want exactly %d", k, got, limit)
			}
		}
	})
}

// TestFrozenClockEvictionRace runs an evictor in a tight loop while keys
// are used. Each round starts with every key idle (the clock moved two
// periods), so the evictor retires states while requests hold them; those
// requests must move on to the successor and never consume from an orphan.
// The clock is frozen within a round, so any orphan grant would show as an
// admission above the limit.
func TestFrozenClockEvictionRace(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		const keys, limit = 200, 10
		clock := floodgate.NewManualClock(0)
		l := mustNew(t, a, floodgate.Config{Algorithm: a.name, Rule: floodgate.Rule{Limit: limit, Period: time.Hour}, Clock: clock})
		names := keyNames(keys)
		stopEvictor := startEvictor(l)
		defer stopEvictor()
		var inline atomic.Int64 // evictions made by the requesting goroutines themselves
		for round := range max(size(20), 3) {
			clock.Advance(2 * time.Hour)
			var admitted [keys]atomic.Int64
			// Keys are picked at random: twice the supply in all would
			// leave some key short of its own, so each round asks for
			// twice that.
			hammer(perRound(20_000, 2*keys*limit), func(r *rand.Rand) {
				if r.IntN(100) == 0 {
					inline.Add(int64(l.EvictIdle()))
				}
				k := r.IntN(keys)
				if l.Allow(names[k]) {
					admitted[k].Add(1)
				}
			})
			for k := range admitted {
				if got := admitted[k].Load(); got != limit {
					t.Fatalf("round %d: key %d admitted %d with eviction racing, want exactly %d", round, k, got, limit)
				}
			}
		}
		evicted := stopEvictor() + inline.Load()
		if evicted == 0 {
			t.Fatal("no key was ever evicted: the race was not exercised")
		}
		t.Logf("evicted %d states during the run", evicted)
	})
}

func TestFrozenClockGlobalCap(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		const keys, limit, global = 1000, 100, 45_678
		l := mustNew(t, a, floodgate.Config{
			Algorithm: a.name,
			Rule:      floodgate.Rule{Limit: limit, Period: time.Second},
			Global:    &floodgate.Rule{Limit: global, Period: time.Second},
			Clock:     floodgate.NewManualClock(0),
		})
		names := keyNames(keys)
		var admitted [keys]atomic.Int64
		var total atomic.Int64
		hammer(demand(1_000_000, global), func(r *rand.Rand) {
			k := r.IntN(keys)
			if l.Allow(names[k]) {
				admitted[k].Add(1)
				total.Add(1)
			}
		})
		if got := total.Load(); got != global {
			t.Fatalf("admitted %d in total, want exactly the global cap %d", got, global)
		}
		for k := range admitted {
			if got := admitted[k].Load(); got > limit {
				t.Fatalf("key %d admitted %d, above its limit %d", k, got, limit)
			}
		}
	})
}

// TestMovingClockRounds advances the clock between rounds of contention,
// with an evictor running throughout. After every round the admissions,
// each at the round's time, must meet the algorithm's invariant, and meet
// it tightly, since demand always exceeds supply.
func TestMovingClockRounds(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		rule := floodgate.Rule{Limit: 100, Period: time.Second} // buckets: one token every 10ms
		if a.family == bucket {
			rule.Burst = 50
		}
		clock := floodgate.NewManualClock(1 << 45)
		l := mustNew(t, a, floodgate.Config{Algorithm: a.name, Rule: rule, Clock: clock})
		stopEvictor := startEvictor(l)
		defer stopEvictor()
		log := newLedger(a.family, rule)
		r := rand.New(rand.NewPCG(3, 4))
		for round := range max(size(100), 20) {
			now := clock.Now()
			var admitted atomic.Int64
			hammer(perRound(20_000, int(rule.Capacity())), func(*rand.Rand) {
				if l.Allow("k") {
					admitted.Add(1)
				}
			})
			log.add(now, admitted.Load())
			if err := log.checkTight(); err != nil {
				t.Fatalf("round %d at %v: %v", round, time.Duration(now), err)
			}
			clock.Advance(time.Duration(1 + r.Int64N(int64(37*time.Millisecond))))
		}
	})
}

// TestStaleClockWithEviction moves the clock while requests run, has every
// request read the clock, yield, and only then reach the limiter with that
// reading (so older readings often land after newer ones), and evicts idle
// keys all along. Each admitted request's reading is recorded, and the
// algorithm's invariant is checked over them all: by request time, not by
// arrival (for the log, by the time it charged, which its Decision tells).
func TestStaleClockWithEviction(t *testing.T) {
	forEach(t, func(t *testing.T, a algorithm) {
		const keys = 64
		rule := floodgate.Rule{Limit: 1000, Period: time.Second} // a token per ms
		if a.family == bucket {
			rule.Burst = 5
		}
		clock := floodgate.NewManualClock(0)
		l := mustNew(t, a, floodgate.Config{Algorithm: a.name, Rule: rule, Clock: clock})
		names := keyNames(keys)
		var mu [keys]sync.Mutex
		var times [keys][]int64
		stopEvictor := startEvictor(l)
		// The requests drive the clock themselves, in uneven steps, so that
		// time moves in step with demand: about one advance per 64
		// attempts, so that demand is about twice the supply.
		// At a few random attempts (at least one a run) the clock leaps two
		// periods, so that window states too fall idle, and the goroutine
		// that moved it evicts at once, racing the requests that read the
		// clock before the leap and reach the limiter after it. No request
		// reads the clock between the leap and that eviction (gate), so
		// every key that no request is writing is idle then: the leap
		// evicts at least one key in every run, never by luck.
		attempts := max(size(400_000), 80_000)
		leaps := leapMoments(attempts, 50_000)
		t.Logf("clock leaps at attempts %v of %d", leaps, attempts)
		var gate sync.RWMutex
		var attempt, leapEvictions atomic.Int64
		// Its quick form is its short form: the run must admit at least
		// every key's capacity (64,000 for the windows) to count.
		hammer(attempts, func(r *rand.Rand) {
			switch {
			case leaps[attempt.Add(1)-1]:
				gate.Lock()
				clock.Advance(2 * rule.Period)
				n := l.EvictIdle()
				for n == 0 && l.Len() > 0 {
					// Every key was being written: wait for the writers,
					// whose readings all precede the leap, to finish.
					runtime.Gosched()
					n = l.EvictIdle()
				}
				gate.Unlock()
				leapEvictions.Add(int64(n))
			case r.IntN(goroutines) == 0:
				clock.Advance(time.Duration(r.Int64N(int64(960 * time.Microsecond))))
			}
			k := r.IntN(keys)
			gate.RLock()
			now := clock.Now()
			gate.RUnlock()
			for range r.IntN(4) {
				runtime.Gosched()
			}
			if d := l.AllowAt(names[k], now, 1); d.Allowed {
				at := now
				if a.family == logged {
					// The log charges a reading that was overtaken at the
					// newest entry's time; ResetAfter tells which.
					at = now + int64(d.ResetAfter) - int64(rule.Period)
				}
				mu[k].Lock()
				times[k] = append(times[k], at)
				mu[k].Unlock()
			}
		})
		evicted := stopEvictor() + leapEvictions.Load()
		var total int64
		for k := range times {
			log := newLedger(a.family, rule)
			for _, at := range sortedCopy(times[k]) {
				log.add(at, 1)
			}
			if err := log.check(); err != nil {
				t.Fatalf("key %d: %v", k, err)
			}
			total += int64(len(times[k]))
		}
		if evicted == 0 || total < keys*rule.Capacity() {
			t.Fatalf("the run did not exercise the race: %d evicted, %d admitted", evicted, total)
		}
		t.Logf("%v of clock, %d admitted in all, %d evictions", time.Duration(clock.Now()), total, evicted)
	})
}

// leapMoments picks the attempts, of n, at which a test moves its clock a
// long way: one in each stretch of every attempts (at least one a run), at
// a random point of the stretch's middle half, so that every leap has
// demand on both sides of it.
func leapMoments(n, every int) map[int64]bool {
	stretches := max(1, n/every)
	stretch := int64(n / stretches)
	moments := make(map[int64]bool, stretches)
	for i := range int64(stretches) {
		moments[i*stretch+stretch/4+rand.Int64N(stretch/2)] = true
	}
	return moments
}

// startEvictor calls EvictIdle in a loop, yielding between calls, until the
// returned function is called; that function returns how many keys were
// evicted in all. Calling it again returns the same count.
func startEvictor(l limiter) (stop func() int64) {
	done := make(chan struct{})
	var evicted atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
				evicted.Add(int64(l.EvictIdle()))
				runtime.Gosched()
			}
		}
	}()
	var once sync.Once
	return func() int64 {
		once.Do(func() { close(done); wg.Wait() })
		return evicted.Load()
	}
}

func keyNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "client-" + strconv.Itoa(i)
	}
	return names
}

func TestMain(m *testing.M) {
	flag.Parse()
	fmt.Printf("stress: GOMAXPROCS raised to %d on %d CPUs, %d goroutines, chaos=%v, long=%v\n",
		max(8, 4*runtime.NumCPU()), runtime.NumCPU(), goroutines, chaos.Enabled, *long)
	testmain.Run(m)
}
