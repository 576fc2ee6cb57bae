package floodgate_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	refimpl "github.com/floodgate-go/floodgate/internal/reference"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// limiter is what a Limiter and the reference limiter both offer.
type limiter interface {
	Allow(key string) bool
	AllowN(key string, n int64) floodgate.Decision
	Peek(key string) floodgate.Decision
	Reset(key string)
	EvictIdle() int
	Len() int
}

// pairs are the algorithms that must answer alike: each lock-free
// algorithm and its mutex twin, and the token bucket and the leaky bucket.
var pairs = [][2]string{
	{floodgate.TokenBucket, testhook.TokenBucketMutex},
	{floodgate.LeakyBucket, testhook.LeakyBucketMutex},
	{floodgate.TokenBucket, testhook.LeakyBucketMutex},
	{floodgate.FixedWindow, testhook.FixedWindowMutex},
	{floodgate.SlidingCounter, testhook.SlidingCounterMutex},
	{floodgate.SlidingLog, testhook.SlidingLogMutex},
}

// onXsync are the algorithms run against themselves on the reference
// limiter: the flat table (with the state inline, for the word
// algorithms) must answer as states kept out of line in the xsync maps
// of the reference registry do.
var onXsync = []string{floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.FixedWindow, floodgate.SlidingCounter, floodgate.SlidingLog}

// FuzzLimiterTwins runs the same operations through two Limiters of a
// pair, over a few keys, with or without a global cap, and requires the
// same answers from both: decisions, peeks, evictions and key counts. The
// pairs after the twins are each algorithm's Limiter against the
// reference limiter of the same algorithm.
func FuzzLimiterTwins(f *testing.F) {
	for i := range len(pairs) + len(onXsync) {
		f.Add(uint8(i), uint8(3), uint16(1000), false, []byte{0, 1, 2, 3, 10, 11, 12, 40, 41, 50, 60, 0, 1, 2})
		f.Add(uint8(i), uint8(1), uint16(7), true, []byte{0, 0, 0, 0, 30, 30, 0, 0, 70, 80, 1, 2})
		f.Add(uint8(i), uint8(8), uint16(60000), true, []byte{9, 19, 29, 39, 49, 59, 69, 79, 89, 99, 255, 254})
		f.Add(uint8(i), uint8(2), uint16(1), false, []byte{70, 70, 0, 71, 72, 73, 3, 3, 3, 90, 91})
	}
	f.Fuzz(func(t *testing.T, pair, limit uint8, periodMs uint16, global bool, ops []byte) {
		k := int(pair) % (len(pairs) + len(onXsync))
		var algs [2]string
		reference := k >= len(pairs)
		if reference {
			algs = [2]string{onXsync[k-len(pairs)], onXsync[k-len(pairs)]}
		} else {
			algs = pairs[k]
		}
		rule := floodgate.Rule{Limit: int64(limit%16) + 1, Period: time.Duration(periodMs%5000+1) * time.Millisecond}
		if algs[0] == floodgate.TokenBucket || algs[0] == floodgate.LeakyBucket {
			rule.Burst = int64(limit / 64)
		}
		var g *floodgate.Rule
		if global {
			g = &floodgate.Rule{Limit: rule.Limit + 2, Period: rule.Period}
		}
		ca, cm := floodgate.NewManualClock(1<<50), floodgate.NewManualClock(1<<50)
		a, err := floodgate.New(testhook.Twins(floodgate.Config{Algorithm: algs[0], Rule: rule, Global: g, Clock: ca}).(floodgate.Config))
		if err != nil {
			t.Fatal(err)
		}
		mc := testhook.Twins(floodgate.Config{Algorithm: algs[1], Rule: rule, Global: g, Clock: cm}).(floodgate.Config)
		var m limiter
		if reference {
			m, err = refimpl.New(mc)
		} else {
			m, err = floodgate.New(mc)
		}
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{"a", "b", "c", "d"}
		step := rule.Period / time.Duration(rule.Limit)
		for i, op := range ops {
			key := keys[int(op)%len(keys)]
			arg := int64(op / 40)
			switch (op / 4) % 10 {
			case 0, 1, 2, 3:
				da, dm := a.AllowN(key, arg+1), m.AllowN(key, arg+1)
				if da != dm {
					t.Fatalf("%v op %d AllowN(%s, %d): %+v vs %+v", algs, i, key, arg+1, da, dm)
				}
			case 4:
				ca.Advance(step * time.Duration(arg+1) / 3)
				cm.Advance(step * time.Duration(arg+1) / 3)
			case 5:
				ca.Advance(-step / 2)
				cm.Advance(-step / 2)
			case 6:
				if pa, pm := a.Peek(key), m.Peek(key); pa != pm {
					t.Fatalf("op %d Peek(%s): %+v vs %+v", i, key, pa, pm)
				}
			case 7:
				a.Reset(key)
				m.Reset(key)
			case 8:
				if ea, em := a.EvictIdle(), m.EvictIdle(); ea != em {
					t.Fatalf("op %d EvictIdle: %d vs %d", i, ea, em)
				}
			case 9:
				if a.Allow(key) != m.Allow(key) {
					t.Fatalf("op %d Allow(%s) differs", i, key)
				}
			}
			if a.Len() != m.Len() {
				t.Fatalf("op %d: Len %d vs %d", i, a.Len(), m.Len())
			}
		}
	})
}
