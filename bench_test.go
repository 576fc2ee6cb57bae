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

// vast is a rule that never denies on a ManualClock that stands still.
var vast = floodgate.Rule{Limit: 1 << 40, Period: time.Hour}

// BenchmarkLimits is Limits.AllowN on one hot key over Limiters that
// admit (two and three of them), and over two of which the last refuses,
// so that the first's grant is given back. The clock is a ManualClock,
// whose read costs nothing, so that what is measured is the decision.
func BenchmarkLimits(b *testing.B) {
	strict := floodgate.Rule{Limit: 1, Period: time.Hour}
	for _, c := range []struct {
		name  string
		rules []floodgate.Rule
	}{
		{"limiters=2", []floodgate.Rule{vast, vast}},
		{"limiters=3", []floodgate.Rule{vast, vast, vast}},
		{"limiters=2-refused", []floodgate.Rule{vast, strict}},
	} {
		b.Run(c.name, func(b *testing.B) {
			clock := floodgate.NewManualClock(0)
			ls := make([]*floodgate.Limiter, len(c.rules))
			for i, r := range c.rules {
				l, err := floodgate.New(floodgate.Config{Rule: r, Clock: clock})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
				ls[i] = l
			}
			m, err := floodgate.NewLimits(ls...)
			if err != nil {
				b.Fatal(err)
			}
			m.Allow("hot")
			b.ReportAllocs()
			for b.Loop() {
				m.AllowN("hot", 1)
			}
		})
	}
}

// BenchmarkLocalStore is a LocalStore's Decide on hot keys, on a
// ManualClock: two asks of two policies that admit, and two of which
// the last refuses.
func BenchmarkLocalStore(b *testing.B) {
	strict := floodgate.Rule{Limit: 1, Period: time.Hour}
	for _, c := range []struct {
		name  string
		rules []floodgate.Rule
	}{
		{"asks=2", []floodgate.Rule{vast, vast}},
		{"asks=2-refused", []floodgate.Rule{vast, strict}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: floodgate.NewManualClock(0)})
			b.Cleanup(func() { s.Close() })
			asks := make([]floodgate.Ask, len(c.rules))
			for i, r := range c.rules {
				p, err := s.Policy(string(rune('a'+i)), floodgate.TokenBucket, r)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { p.Close() })
				asks[i] = floodgate.Ask{Policy: p, Key: "hot", N: 1}
			}
			ctx, each := b.Context(), make([]floodgate.Decision, len(asks))
			s.Decide(ctx, asks, each)
			b.ReportAllocs()
			for b.Loop() {
				s.Decide(ctx, asks, each)
			}
		})
	}
}
