package floodgate_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The benchmarks compare the lock-free token bucket with its mutex twin on
// the scenarios a service meets. Names put the implementation last, so
// `benchstat -col /impl` lays the two side by side:
//
//	BenchmarkAllow/scenario=hotkey/impl=floodgate-tb
//	BenchmarkAllow/scenario=hotkey/impl=floodgate-tb-mutex

var impls = []struct{ name, algorithm string }{
	{"floodgate-tb", floodgate.TokenBucket},
	{"floodgate-tb-mutex", floodgate.TokenBucketMutex},
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
var plenty = floodgate.Rule{Limit: 1 << 40, Period: 1 << 50, Burst: 1 << 40}

func BenchmarkAllow(b *testing.B) {
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	for _, im := range impls {
		b.Run("scenario=hotkey/impl="+im.name, func(b *testing.B) {
			benchHotKey(b, benchLimiter(b, im.algorithm, plenty, nil))
		})
	}
	for _, im := range impls {
		b.Run("scenario=hotkey-parallel/impl="+im.name, func(b *testing.B) {
			l := benchLimiter(b, im.algorithm, plenty, nil)
			l.Allow("hot")
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Allow("hot")
				}
			})
		})
	}
	// Denials write nothing, so a flood of them on one exhausted key
	// should scale with cores.
	for _, im := range impls {
		b.Run("scenario=denial-flood-parallel/impl="+im.name, func(b *testing.B) {
			l := benchLimiter(b, im.algorithm, floodgate.Rule{Limit: 1, Period: time.Hour}, nil)
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
	}
	for _, n := range []int{1 << 10, 1 << 20} {
		for _, im := range impls {
			b.Run("scenario=keys="+strconv.Itoa(n)+"-parallel/impl="+im.name, func(b *testing.B) {
				l := benchLimiter(b, im.algorithm, plenty, nil)
				for _, k := range keys[:n] {
					l.Allow(k)
				}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					r := rand.New(rand.NewPCG(rand.Uint64(), 1))
					for pb.Next() {
						l.Allow(keys[r.IntN(n)])
					}
				})
			})
		}
	}
	// AllowN computes the whole Decision, for 429 headers.
	for _, im := range impls {
		b.Run("scenario=hotkey-allown/impl="+im.name, func(b *testing.B) {
			l := benchLimiter(b, im.algorithm, plenty, nil)
			l.Allow("hot")
			b.ReportAllocs()
			for b.Loop() {
				l.AllowN("hot", 1)
			}
		})
	}
	// A manual clock takes the clock read out of the measurement: what is
	// left is the map lookup and the CAS.
	for _, im := range impls {
		b.Run("scenario=hotkey-noclock/impl="+im.name, func(b *testing.B) {
			benchHotKey(b, benchLimiter(b, im.algorithm, plenty, floodgate.NewManualClock(0)))
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
