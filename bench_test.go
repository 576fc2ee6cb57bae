package floodgate_test

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The benchmarks compare each lock-free algorithm with its mutex twin on
// the scenarios a service meets. Names put the implementation last, so
// `benchstat -col /impl` lays the two side by side:
//
//	BenchmarkAllow/alg=token_bucket/scenario=hotkey/impl=lockfree
//	BenchmarkAllow/alg=token_bucket/scenario=hotkey/impl=mutex

type twinPair struct{ alg, lockFree, mutex string }

var twinPairs = []twinPair{
	{"token_bucket", floodgate.TokenBucket, floodgate.TokenBucketMutex},
	{"leaky_bucket", floodgate.LeakyBucket, floodgate.LeakyBucketMutex},
	{"fixed_window", floodgate.FixedWindow, floodgate.FixedWindowMutex},
	{"sliding_counter", floodgate.SlidingCounter, floodgate.SlidingCounterMutex},
	{"sliding_log", floodgate.SlidingLog, floodgate.SlidingLogMutex},
}

// each runs f for every algorithm as lockfree and as mutex.
func each(b *testing.B, scenario string, f func(b *testing.B, algorithm string)) {
	for _, p := range twinPairs {
		b.Run("alg="+p.alg+"/scenario="+scenario+"/impl=lockfree", func(b *testing.B) { f(b, p.lockFree) })
		b.Run("alg="+p.alg+"/scenario="+scenario+"/impl=mutex", func(b *testing.B) { f(b, p.mutex) })
	}
}

func benchLimiter(b *testing.B, algorithm string, rule floodgate.Rule, clock floodgate.Clock) *floodgate.Limiter {
	l, err := floodgate.New(floodgate.Config{Algorithm: algorithm, Rule: rule, Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// plenty is a rule that never denies at benchmark speeds, so that the
// numbers measure the grant path.
var plenty = floodgate.Rule{Limit: 1_000_000, Period: time.Millisecond}

func BenchmarkAllow(b *testing.B) {
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	each(b, "hotkey", func(b *testing.B, alg string) {
		benchHotKey(b, benchLimiter(b, alg, plenty, nil))
	})
	each(b, "hotkey-parallel", func(b *testing.B, alg string) {
		l := benchLimiter(b, alg, plenty, nil)
		l.Allow("hot")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow("hot")
			}
		})
	})
	// Denials write nothing in the lock-free states, so a flood of them on
	// one exhausted key should scale with cores.
	each(b, "denial-flood-parallel", func(b *testing.B, alg string) {
		l := benchLimiter(b, alg, floodgate.Rule{Limit: 1, Period: time.Hour}, nil)
		l.Allow("hot")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if l.Allow("hot") {
					panic("an exhausted key passed")
				}
			}
		})
	})
	// AllowN computes the whole Decision, for 429 headers.
	each(b, "hotkey-allown", func(b *testing.B, alg string) {
		l := benchLimiter(b, alg, plenty, nil)
		l.Allow("hot")
		b.ReportAllocs()
		for b.Loop() {
			l.AllowN("hot", 1)
		}
	})
	each(b, "keys=1024-parallel", func(b *testing.B, alg string) {
		benchKeys(b, benchLimiter(b, alg, plenty, nil), keys[:1024])
	})
	// The rest runs for the token bucket only, to keep make bench short.
	for _, impl := range []struct{ name, alg string }{{"lockfree", floodgate.TokenBucket}, {"mutex", floodgate.TokenBucketMutex}} {
		b.Run("alg=token_bucket/scenario=keys=1048576-parallel/impl="+impl.name, func(b *testing.B) {
			benchKeys(b, benchLimiter(b, impl.alg, plenty, nil), keys)
		})
		// A manual clock takes the clock read out of the measurement: what
		// is left is the map lookup and the CAS.
		b.Run("alg=token_bucket/scenario=hotkey-noclock/impl="+impl.name, func(b *testing.B) {
			benchHotKey(b, benchLimiter(b, impl.alg, plenty, floodgate.NewManualClock(0)))
		})
		// A coarse clock, refreshed every millisecond, makes the read one
		// atomic load.
		b.Run("alg=token_bucket/scenario=hotkey-coarseclock/impl="+impl.name, func(b *testing.B) {
			c := floodgate.NewCoarseClock(time.Millisecond)
			defer c.Stop()
			benchHotKey(b, benchLimiter(b, impl.alg, plenty, c))
		})
	}
}

// benchHotKey calls Allow on one existing key from one goroutine.
func benchHotKey(b *testing.B, l *floodgate.Limiter) {
	l.Allow("hot")
	b.ReportAllocs()
	for b.Loop() {
		l.Allow("hot")
	}
}

// benchKeys calls Allow on keys chosen uniformly, from every core; the keys
// exist before the timer starts.
func benchKeys(b *testing.B, l *floodgate.Limiter, keys []string) {
	for _, k := range keys {
		l.Allow(k)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			l.Allow(keys[r.IntN(len(keys))])
		}
	})
}

// BenchmarkBytesPerKey reports the live heap per key held, at 100,000 keys:
// the heap after a GC with the keys, less the heap before, over the keys.
// The key strings themselves (about 16 bytes each here) are made before the
// first reading and are not counted.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	each(b, "keys=100000", func(b *testing.B, alg string) {
		var perKey float64
		for b.Loop() {
			before := liveHeap()
			l := benchLimiter(b, alg, floodgate.Rule{Limit: 100, Period: time.Second}, floodgate.NewManualClock(0))
			for _, k := range keys {
				l.Allow(k)
			}
			perKey = float64(liveHeap()-before) / n
			runtime.KeepAlive(l)
		}
		b.ReportMetric(perKey, "B/key")
	})
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
