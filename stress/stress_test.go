package stress

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/chaos"
)

var long = flag.Bool("long", false, "run for minutes instead of seconds")

// scale multiplies the attempts of every test under -long.
func scale() int {
	if *long {
		return 20
	}
	return 1
}

const goroutines = 64

// setup raises GOMAXPROCS above the cores for the test and returns the
// algorithms to run. Under the chaos tag it checks, at the end, that the
// lock-free algorithm's CASes really lost races.
func setup(t *testing.T) {
	t.Helper()
	procs := max(8, 4*runtime.NumCPU())
	old := runtime.GOMAXPROCS(procs)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// forEach runs f for the lock-free token bucket and its mutex twin.
func forEach(t *testing.T, f func(t *testing.T, algorithm string)) {
	setup(t)
	for _, alg := range []string{floodgate.TokenBucket, floodgate.TokenBucketMutex} {
		t.Run(alg, func(t *testing.T) {
			before := chaos.Retries()
			f(t, alg)
			if alg == floodgate.TokenBucket {
				retries := chaos.Retries() - before
				if chaos.Enabled && retries == 0 {
					t.Fatal("no CAS ever retried: the test did not contend, so it proves nothing")
				}
				t.Logf("CAS retries: %d (counted only with -tags chaos)", retries)
			}
		})
	}
}

func mustNew(t *testing.T, cfg floodgate.Config) *floodgate.Limiter {
	t.Helper()
	l, err := floodgate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// hammer runs goroutines that together make attempts calls of try, and
// returns when all are done.
func hammer(attempts int, try func(r *rand.Rand)) {
	var wg sync.WaitGroup
	per := (attempts + goroutines - 1) / goroutines
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range per {
				try(r)
			}
		}()
	}
	wg.Wait()
}

func TestFrozenClockOneKey(t *testing.T) {
	forEach(t, func(t *testing.T, alg string) {
		for _, burst := range []int64{1, 1000, 65536} {
			l := mustNew(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 1000, Period: time.Second, Burst: burst}, Clock: floodgate.NewManualClock(12345)})
			var admitted atomic.Int64
			hammer(1_000_000*scale(), func(*rand.Rand) {
				if l.Allow("hot") {
					admitted.Add(1)
				}
			})
			if got := admitted.Load(); got != burst {
				t.Fatalf("burst %d: admitted %d of 1M attempts on one key, want exactly %d", burst, got, burst)
			}
		}
	})
}

// TestFrozenClockWeighted: costs of 1 to 7 on one key; the admitted cost
// totals exactly the capacity once the bucket cannot fit even a cost of 1.
func TestFrozenClockWeighted(t *testing.T) {
	forEach(t, func(t *testing.T, alg string) {
		const burst = 10_000
		l := mustNew(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: burst, Period: time.Second}, Clock: floodgate.NewManualClock(0)})
		var cost atomic.Int64
		hammer(1_000_000*scale(), func(r *rand.Rand) {
			n := 1 + r.Int64N(7)
			if l.AllowN("w", n).Allowed {
				cost.Add(n)
			}
		})
		if got := cost.Load(); got != burst {
			t.Fatalf("admitted cost %d, want exactly %d", got, burst)
		}
	})
}

func TestFrozenClockThousandKeys(t *testing.T) {
	forEach(t, func(t *testing.T, alg string) {
		const keys, burst = 1000, 100
		l := mustNew(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: burst, Period: time.Second}, Clock: floodgate.NewManualClock(0)})
		names := keyNames(keys)
		var admitted [keys]atomic.Int64
		hammer(1_000_000*scale(), func(r *rand.Rand) {
			k := r.IntN(keys)
			if l.Allow(names[k]) {
				admitted[k].Add(1)
			}
		})
		for k := range admitted {
			if got := admitted[k].Load(); got != burst {
				t.Fatalf("key %d admitted %d, want exactly %d", k, got, burst)
			}
		}
	})
}

// TestFrozenClockEvictionRace runs an evictor in a tight loop while keys
// are used. Each round starts with every key idle (the clock moved an hour),
// so the evictor retires states while requests hold them; those requests
// must move on to the successor and never consume from an orphan. The clock
// is frozen within a round, so any orphan grant would show as an admission
// above the burst.
func TestFrozenClockEvictionRace(t *testing.T) {
	forEach(t, func(t *testing.T, alg string) {
		const keys, burst = 200, 10
		clock := floodgate.NewManualClock(0)
		l := mustNew(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: burst, Period: time.Hour}, Clock: clock})
		names := keyNames(keys)
		stopEvictor := startEvictor(l)
		for round := range 20 * scale() {
			clock.Advance(time.Hour)
			var admitted [keys]atomic.Int64
			hammer(20_000, func(r *rand.Rand) {
				k := r.IntN(keys)
				if l.Allow(names[k]) {
					admitted[k].Add(1)
				}
			})
			for k := range admitted {
				if got := admitted[k].Load(); got != burst {
					stopEvictor()
					t.Fatalf("round %d: key %d admitted %d with eviction racing, want exactly %d", round, k, got, burst)
				}
			}
		}
		evicted := stopEvictor()
		if evicted == 0 {
			t.Fatal("the evictor never evicted a key: the race was not exercised")
		}
		t.Logf("evicted %d states during the run", evicted)
	})
}

func TestFrozenClockGlobalCap(t *testing.T) {
	forEach(t, func(t *testing.T, alg string) {
		const keys, burst, global = 1000, 100, 45_678
		l := mustNew(t, floodgate.Config{
			Algorithm: alg,
			Rule:      floodgate.Rule{Limit: burst, Period: time.Second},
			Global:    &floodgate.Rule{Limit: global, Period: time.Second},
			Clock:     floodgate.NewManualClock(0),
		})
		names := keyNames(keys)
		var admitted [keys]atomic.Int64
		var total atomic.Int64
		hammer(1_000_000*scale(), func(r *rand.Rand) {
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
			if got := admitted[k].Load(); got > burst {
				t.Fatalf("key %d admitted %d, above its burst %d", k, got, burst)
			}
		}
	})
}

// TestMovingClockRounds advances the clock between rounds of contention:
// after every round the admitted total is exactly B + Limit × elapsed /
// Period, since demand always exceeds supply.
func TestMovingClockRounds(t *testing.T) {
	forEach(t, func(t *testing.T, alg string) {
		const limit, burst = 100, 50 // one token every 10ms
		clock := floodgate.NewManualClock(1 << 45)
		start := clock.Now()
		l := mustNew(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: limit, Period: time.Second, Burst: burst}, Clock: clock})
		var admitted atomic.Int64
		r := rand.New(rand.NewPCG(3, 4))
		for round := range 100 * scale() {
			hammer(20_000, func(*rand.Rand) {
				if l.Allow("k") {
					admitted.Add(1)
				}
			})
			elapsed := clock.Now() - start
			want := burst + elapsed*limit/int64(time.Second)
			if got := admitted.Load(); got != want {
				t.Fatalf("round %d, %v elapsed: admitted %d, want exactly %d", round, time.Duration(elapsed), got, want)
			}
			clock.Advance(time.Duration(1 + r.Int64N(int64(37*time.Millisecond))))
		}
	})
}

// staleClock reads a ManualClock and then yields a few times before the
// reading reaches the bucket, so that requests arrive out of order: an
// older reading often lands after a newer one.
type staleClock struct{ c *floodgate.ManualClock }

func (s staleClock) Now() int64 {
	t := s.c.Now()
	for range rand.IntN(4) {
		runtime.Gosched()
	}
	return t
}

// TestStaleClockWithEviction moves the clock while requests run, delays
// every reading so that older readings often land after newer ones, and
// evicts idle keys all along. No key may ever pass more
// than B + Limit × (t_max − t_min) / Period.
func TestStaleClockWithEviction(t *testing.T) {
	forEach(t, func(t *testing.T, alg string) {
		const keys, limit, burst = 64, 1000, 5 // a token per ms
		clock := floodgate.NewManualClock(0)
		l := mustNew(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: limit, Period: time.Second, Burst: burst}, Clock: staleClock{clock}})
		names := keyNames(keys)
		var admitted [keys]atomic.Int64
		tMin := clock.Now()
		stopEvictor := startEvictor(l)
		// The requests drive the clock themselves, in uneven steps, so that
		// time moves in step with demand: about one advance per 64 attempts,
		// tuned so that demand is about twice the supply.
		hammer(400_000*scale(), func(r *rand.Rand) {
			if r.IntN(goroutines) == 0 {
				clock.Advance(time.Duration(r.Int64N(int64(960 * time.Microsecond))))
			}
			k := r.IntN(keys)
			if l.Allow(names[k]) {
				admitted[k].Add(1)
			}
		})
		tMax := clock.Now()
		evicted := stopEvictor()
		bound := burst + (tMax-tMin)*limit/int64(time.Second)
		var total int64
		for k := range admitted {
			got := admitted[k].Load()
			total += got
			if got > bound {
				t.Fatalf("key %d admitted %d over %v, above the bound %d", k, got, time.Duration(tMax-tMin), bound)
			}
		}
		if evicted == 0 || total < int64(keys)*burst {
			t.Fatalf("the run did not exercise the race: %d evicted, %d admitted", evicted, total)
		}
		t.Logf("%v of clock, bound %d per key, %d admitted in all (%.0f%% of the bound), %d evictions",
			time.Duration(tMax-tMin), bound, total, 100*float64(total)/float64(bound*keys), evicted)
	})
}

// startEvictor calls EvictIdle in a loop, yielding between calls, until the
// returned function is called; that function returns how many keys were
// evicted in all. Calling it again returns the same count.
func startEvictor(l *floodgate.Limiter) (stop func() int64) {
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
	m.Run()
}
