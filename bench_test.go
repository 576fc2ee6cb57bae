package floodgate_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// The comparison with the peers, and of every algorithm with its twin on
// hot keys, key sets, denials, churn and a global cap, is the harness in
// bench/ (make bench). What stays here are the two measurements it does
// not make, for work on the core: AllowN with its whole Decision, and
// Allow with the clock read taken out. Names put the implementation last,
// so `benchstat -col /impl` lays the twins side by side.

type twinPair struct{ alg, lockFree, mutex string }

var twinPairs = []twinPair{
	{"token_bucket", floodgate.TokenBucket, testhook.TokenBucketMutex},
	{"leaky_bucket", floodgate.LeakyBucket, testhook.LeakyBucketMutex},
	{"fixed_window", floodgate.FixedWindow, testhook.FixedWindowMutex},
	{"sliding_counter", floodgate.SlidingCounter, testhook.SlidingCounterMutex},
	{"sliding_log", floodgate.SlidingLog, testhook.SlidingLogMutex},
}

func benchLimiter(b *testing.B, algorithm string, clock floodgate.Clock) *floodgate.Limiter {
	l, err := floodgate.New(testhook.Twins(floodgate.Config{Algorithm: algorithm, Rule: plenty, Clock: clock}).(floodgate.Config))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// plenty is a rule that never denies at benchmark speeds, so that the
// numbers measure the grant path.
var plenty = floodgate.Rule{Limit: 1_000_000, Period: time.Millisecond}

// BenchmarkAllowN computes the whole Decision (Remaining, RetryAfter,
// ResetAfter) on one hot key, for every algorithm and its twin; Allow
// skips all but the verdict.
func BenchmarkAllowN(b *testing.B) {
	for _, p := range twinPairs {
		for _, impl := range []struct{ name, alg string }{{"lockfree", p.lockFree}, {"mutex", p.mutex}} {
			b.Run("alg="+p.alg+"/scenario=hotkey-allown/impl="+impl.name, func(b *testing.B) {
				l := benchLimiter(b, impl.alg, nil)
				l.Allow("hot")
				b.ReportAllocs()
				for b.Loop() {
					l.AllowN("hot", 1)
				}
			})
		}
	}
}

// BenchmarkAllowNoClock is Allow on one hot key with a ManualClock: what
// is left without the clock read is the map lookup and the CAS.
func BenchmarkAllowNoClock(b *testing.B) {
	for _, impl := range []struct{ name, alg string }{{"lockfree", floodgate.TokenBucket}, {"mutex", testhook.TokenBucketMutex}} {
		b.Run("alg=token_bucket/scenario=hotkey-noclock/impl="+impl.name, func(b *testing.B) {
			l := benchLimiter(b, impl.alg, floodgate.NewManualClock(0))
			l.Allow("hot")
			b.ReportAllocs()
			for b.Loop() {
				l.Allow("hot")
			}
		})
	}
}
