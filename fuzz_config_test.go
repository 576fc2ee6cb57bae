package floodgate_test

import (
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// grant is one admitted request in FuzzConfig: its key, instant and cost.
type grant struct {
	key  int
	at   int64
	cost int64
}

// builtins are the algorithms FuzzConfig draws from, sorted by name: the
// built-in ones, and not every name New takes, which include whatever
// other tests of the package registered before it ran.
var builtins = []string{
	floodgate.FixedWindow, testhook.FixedWindowMutex, floodgate.LeakyBucket, testhook.LeakyBucketMutex,
	floodgate.SlidingCounter, testhook.SlidingCounterMutex, floodgate.SlidingLog, testhook.SlidingLogMutex,
	floodgate.TokenBucket, testhook.TokenBucketMutex,
}

// FuzzConfig builds a Limiter from a random Config: any registered
// algorithm (or an unknown name), a rule and an optional global cap from
// raw integers, a MaxKeys bound, then drives it with random costs on three
// keys and random forward moves of a manual clock. New must either return
// an error or give a Limiter that keeps its algorithm's invariant on every
// key, and the global cap's over all of them:
//
//   - token and leaky bucket: in any span [a, b] of admissions, a key's
//     admitted cost is at most Capacity + Limit × (b − a) / Period;
//   - fixed window and sliding counter: at most Limit in any window
//     [k·Period, (k+1)·Period);
//   - sliding log: at most Limit in any span (t − Period, t];
//   - the global cap: the bucket bound over all keys.
//
// A cost below 1 or above the capacity must be refused with RetryAfter ==
// Never. Nothing may panic.
func FuzzConfig(f *testing.F) {
	ms := int64(time.Millisecond)
	f.Add(uint8(0), int64(5), int64(time.Second), int64(0), false, int64(0), int64(0), uint8(0), []byte{1, 1, 1, 1, 1, 1, 9, 1, 1})
	f.Add(uint8(1), int64(3), int64(10*ms), int64(7), true, int64(4), int64(10*ms), uint8(2), []byte{1, 2, 3, 200, 1, 1, 130, 2, 2, 2})
	f.Add(uint8(2), int64(4), int64(100*ms), int64(0), false, int64(0), int64(0), uint8(1), []byte{1, 1, 1, 1, 1, 150, 1, 1, 1, 1, 1, 1})
	f.Add(uint8(3), int64(10), int64(100*ms), int64(10), true, int64(6), int64(ms), uint8(0), []byte{3, 3, 3, 3, 140, 3, 3, 3, 170, 3, 3})
	f.Add(uint8(4), int64(6), int64(50*ms), int64(0), false, int64(0), int64(0), uint8(3), []byte{2, 2, 2, 2, 2, 135, 2, 2, 2, 200, 2})
	f.Add(uint8(5), int64(0), int64(time.Second), int64(0), false, int64(0), int64(0), uint8(0), []byte{1})           // zero limit
	f.Add(uint8(6), int64(1), int64(-1), int64(0), false, int64(0), int64(0), uint8(0), []byte{1})                    // negative period
	f.Add(uint8(7), int64(1), int64(1<<62), int64(1<<40), false, int64(0), int64(0), uint8(0), []byte{1})             // overflowing rule
	f.Add(uint8(8), int64(2), int64(time.Second), int64(3), false, int64(0), int64(0), uint8(0), []byte{1})           // a window with a burst
	f.Add(uint8(20), int64(2), int64(time.Second), int64(0), false, int64(0), int64(0), uint8(0), []byte{1})          // unknown algorithm
	f.Add(uint8(9), int64(2), int64(time.Second), int64(0), true, int64(-3), int64(time.Second), uint8(0), []byte{1}) // bad global
	f.Add(uint8(0), int64(1), int64(1), int64(0), false, int64(0), int64(0), uint8(0), []byte{0, 126, 127, 1, 1})     // one per ns, bad costs
	// 6 and 7 in builtins are the sliding log and its twin, 8 and 9 the
	// token bucket and its twin.
	f.Add(uint8(6), int64(5), int64(100*ms), int64(0), false, int64(0), int64(0), uint8(2), []byte{0, 0, 0, 0, 0, 0, 0, 140, 0, 0, 0, 170, 1, 1, 1})
	f.Add(uint8(7), int64(5), int64(100*ms), int64(0), true, int64(7), int64(100*ms), uint8(0), []byte{3, 4, 5, 150, 3, 4, 5, 3, 4, 5})
	f.Add(uint8(8), int64(4), int64(40*ms), int64(6), true, int64(5), int64(10*ms), uint8(1), []byte{6, 6, 7, 8, 130, 6, 7, 8, 140, 6, 6})
	f.Add(uint8(9), int64(2), int64(time.Minute), int64(2), false, int64(0), int64(0), uint8(3), []byte{3, 4, 5, 6, 7, 8, 255, 3, 4})
	names := append(slices.Clone(builtins), "no_such_algorithm")
	f.Fuzz(func(t *testing.T, alg uint8, limit, period, burst int64, global bool, glimit, gperiod int64, maxKeys uint8, ops []byte) {
		name := names[int(alg)%len(names)]
		rule := floodgate.Rule{Limit: limit, Period: time.Duration(period), Burst: burst}
		cfg := floodgate.Config{Algorithm: name, Rule: rule, MaxKeys: int(maxKeys % 4)}
		var g *floodgate.Rule
		if global {
			g = &floodgate.Rule{Limit: glimit, Period: time.Duration(gperiod)}
			cfg.Global = g
		}
		clock := floodgate.NewManualClock(1 << 40)
		cfg.Clock = clock
		l, err := floodgate.New(testhook.Twins(cfg).(floodgate.Config))
		if err != nil {
			return // refused, as it may be; the point is that it did not panic
		}
		defer l.Close()
		capacity := rule.Capacity()
		if len(ops) > 512 {
			ops = ops[:512] // the checks below are quadratic
		}
		var grants []grant
		for _, op := range ops {
			switch {
			case op >= 128: // move the clock forward by a random share of the period
				step := int64(op-127) * max(1, min(period, 1<<40)/64)
				if clock.Now() < 1<<61 {
					clock.Advance(time.Duration(step))
				}
				continue
			}
			key := int(op) % 3
			n := 1 + int64(op/3)%5
			switch op {
			case 126:
				n = 0
			case 127:
				n = capacity + 1
			}
			d := l.AllowN([]string{"a", "b", "c"}[key], n)
			if n < 1 || n > capacity {
				if d.Allowed || d.RetryAfter != floodgate.Never {
					t.Fatalf("%s %+v: a cost of %d (capacity %d) answered %+v", name, rule, n, capacity, d)
				}
				continue
			}
			if d.Allowed {
				grants = append(grants, grant{key, clock.Now(), n})
			}
		}
		for key := range 3 {
			var mine []grant
			for _, gr := range grants {
				if gr.key == key {
					mine = append(mine, gr)
				}
			}
			checkInvariant(t, name, rule, mine)
		}
		if g != nil {
			checkBucket(t, "global", *g, g.Capacity(), grants)
		}
	})
}

// checkInvariant holds one key's grants to its algorithm's bound.
func checkInvariant(t *testing.T, name string, r floodgate.Rule, gs []grant) {
	t.Helper()
	switch name {
	case floodgate.TokenBucket, testhook.TokenBucketMutex, floodgate.LeakyBucket, testhook.LeakyBucketMutex:
		checkBucket(t, name, r, r.Capacity(), gs)
	case floodgate.FixedWindow, testhook.FixedWindowMutex, floodgate.SlidingCounter, testhook.SlidingCounterMutex:
		per := map[int64]int64{}
		for _, g := range gs {
			k := g.at / int64(r.Period) // the clock is positive: floor
			if per[k] += g.cost; per[k] > r.Limit {
				t.Fatalf("%s %+v: window %d admitted %d", name, r, k, per[k])
			}
		}
	case floodgate.SlidingLog, testhook.SlidingLogMutex:
		for j := range gs {
			sum := int64(0)
			for i := j; i >= 0 && gs[i].at > gs[j].at-int64(r.Period); i-- {
				sum += gs[i].cost
			}
			if sum > r.Limit {
				t.Fatalf("%s %+v: %d admitted in the period ending at %d", name, r, sum, gs[j].at)
			}
		}
	default:
		t.Fatalf("no invariant for algorithm %q", name)
	}
}

// checkBucket checks that in every span between two grants the cost
// admitted is at most capacity + Limit × span / Period, exactly. The
// grants are in the order they were made, and the clock only moves
// forward, so their times never decrease.
func checkBucket(t *testing.T, name string, r floodgate.Rule, capacity int64, gs []grant) {
	t.Helper()
	period := big.NewInt(int64(r.Period))
	for i := range gs {
		sum := int64(0)
		for j := i; j < len(gs); j++ {
			sum += gs[j].cost
			// sum × Period ≤ capacity × Period + Limit × span
			lhs := new(big.Int).Mul(big.NewInt(sum), period)
			rhs := new(big.Int).Mul(big.NewInt(capacity), period)
			rhs.Add(rhs, new(big.Int).Mul(big.NewInt(r.Limit), big.NewInt(gs[j].at-gs[i].at)))
			if lhs.Cmp(rhs) > 0 {
				t.Fatalf("%s %+v: %d admitted between %d and %d, beyond capacity %d + the refill", name, r, sum, gs[i].at, gs[j].at, capacity)
			}
		}
	}
}

// TestBuiltinsAreRegistered keeps FuzzConfig's list in step with the
// algorithms the package registers itself: each is registered, and
// listed by the error of an unknown name, unless it is a mutex twin,
// which that error never lists and New builds only through
// internal/testhook.
func TestBuiltinsAreRegistered(t *testing.T) {
	if !slices.IsSorted(builtins) {
		t.Fatal("builtins is not sorted")
	}
	_, err := floodgate.New(floodgate.Config{Algorithm: "no_such_algorithm", Rule: floodgate.Rule{Limit: 1, Period: time.Second}})
	if err == nil {
		t.Fatal("New took an unknown algorithm")
	}
	_, list, _ := strings.Cut(err.Error(), "(registered: ")
	listed := strings.Split(strings.TrimSuffix(list, ")"), ", ")
	for _, name := range builtins {
		twin := strings.HasSuffix(name, "_mutex")
		if slices.Contains(listed, name) == twin {
			t.Errorf("%q: listed by an unknown name's error is %v, a mutex twin is %v", name, !twin, twin)
		}
		cfg := floodgate.Config{Algorithm: name, Rule: floodgate.Rule{Limit: 1, Period: time.Second}}
		if _, err := floodgate.New(testhook.Twins(cfg).(floodgate.Config)); err != nil {
			t.Errorf("%q through internal/hook: %v", name, err)
		}
		if _, err := floodgate.New(cfg); (err != nil) != twin {
			t.Errorf("%q by name: New returned %v", name, err)
		}
		if err := testhook.Register(name, func(floodgate.Rule) (keystate.Algorithm, error) { return nil, nil }); err == nil {
			t.Errorf("%q could be registered again", name)
		}
	}
}
