package floodgate_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// chargeRule is the rule of the charge tests: 10 a second, no burst
// beyond it, so that every algorithm holds 10 when full.
var chargeRule = floodgate.Rule{Limit: 10, Period: time.Second}

// TestChargeIntoDebt: a charge past what a key holds is taken whole,
// leaves the key owing the rest, and every request is refused until the
// debt is paid; two periods later every algorithm is full again.
func TestChargeIntoDebt(t *testing.T) {
	for _, alg := range every {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock})
			if d := l.AllowN("k", 4); !d.Allowed || d.Remaining != 6 || d.Owed != 0 {
				t.Fatalf("AllowN(4): %+v", d)
			}
			d, err := l.Charge("k", 15)
			if err != nil || !d.Allowed || d.Remaining != 0 || d.Owed != 9 || d.RetryAfter <= 0 {
				t.Fatalf("Charge(15) after 4: %+v, %v; want taken, 0 left, 9 owed, a wait", d, err)
			}
			if d := l.AllowN("k", 1); d.Allowed || d.Owed != 9 || d.RetryAfter <= 0 {
				t.Fatalf("AllowN(1) while owing: %+v", d)
			}
			if l.Allow("k") {
				t.Fatal("Allow while owing")
			}
			if p := l.Peek("k"); p.Allowed || p.Owed != 9 {
				t.Fatalf("Peek while owing: %+v", p)
			}
			// A charge while owing is taken too: a cost already spent.
			if d, err := l.Charge("k", 1); err != nil || !d.Allowed || d.Owed != 10 {
				t.Fatalf("Charge(1) while owing: %+v, %v", d, err)
			}
			clock.Advance(2 * time.Second)
			if p := l.Peek("k"); !p.Allowed || p.Owed != 0 || p.Remaining != 9 {
				t.Fatalf("Peek two periods later: %+v, want full (Remaining 9 after the one it asks)", p)
			}
		})
	}
}

// TestChargeRepaidAtTheRate: a bucket's debt is paid back at the rule's
// rate: 5 owed at 10 a second admits nothing for 500 ms, then 1 a 100 ms.
func TestChargeRepaidAtTheRate(t *testing.T) {
	for _, alg := range []string{floodgate.TokenBucket, testhook.TokenBucketMutex, floodgate.LeakyBucket, testhook.LeakyBucketMutex} {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock})
			if d, err := l.Charge("k", 15); err != nil || d.Owed != 5 || d.RetryAfter != 600*time.Millisecond {
				t.Fatalf("Charge(15) on a full key: %+v, %v; want 5 owed, the next request in 600 ms", d, err)
			}
			clock.Advance(500 * time.Millisecond)
			if d := l.AllowN("k", 1); d.Allowed || d.Owed != 0 || d.RetryAfter != 100*time.Millisecond {
				t.Fatalf("after 500 ms: %+v; want the debt paid, one in 100 ms", d)
			}
			clock.Advance(100 * time.Millisecond)
			if !l.Allow("k") || l.Allow("k") {
				t.Fatal("after 600 ms: want exactly one")
			}
		})
	}
}

// TestChargeWindowEnds: a fixed window's debt ends with its window; a
// sliding counter's ages out as the window slides.
func TestChargeWindowEnds(t *testing.T) {
	for _, alg := range []string{floodgate.FixedWindow, testhook.FixedWindowMutex} {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour)) // a window's start
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock})
			if d, err := l.Charge("k", 25); err != nil || d.Owed != 15 || d.RetryAfter != time.Second {
				t.Fatalf("Charge(25): %+v, %v", d, err)
			}
			clock.Advance(time.Second - 1)
			if l.Allow("k") {
				t.Fatal("admitted in the window of the debt")
			}
			clock.Advance(1)
			if d := l.AllowN("k", 10); !d.Allowed || d.Owed != 0 {
				t.Fatalf("the next window: %+v, want all 10", d)
			}
		})
	}
	for _, alg := range []string{floodgate.SlidingCounter, testhook.SlidingCounterMutex} {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock})
			if d, err := l.Charge("k", 20); err != nil || d.Owed != 10 {
				t.Fatalf("Charge(20): %+v, %v", d, err)
			}
			// In the next window, 20 × (1 − e) ≤ 9 from e = 0.55.
			clock.Advance(time.Second + 540*time.Millisecond)
			if l.Allow("k") {
				t.Fatal("admitted with 20 × 0.46 = 9.2 of the last window still counted")
			}
			clock.Advance(10 * time.Millisecond)
			if !l.Allow("k") {
				t.Fatal("refused with 20 × 0.45 = 9 counted")
			}
		})
	}
}

// TestChargeErrors: a cost below 1, and a charge past what a key can owe,
// are errors that charge nothing.
func TestChargeErrors(t *testing.T) {
	for _, alg := range every {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock, Global: &floodgate.Rule{Limit: 100, Period: time.Second}})
			l.AllowN("k", 3)
			before := l.Peek("k")
			for _, n := range []int64{0, -1, math.MinInt64} {
				if _, err := l.Charge("k", n); err == nil {
					t.Errorf("Charge(%d): no error", n)
				}
			}
			if _, err := l.Charge("k", math.MaxInt64); !errors.Is(err, floodgate.ErrDebtBound) {
				t.Errorf("Charge(MaxInt64): %v, want ErrDebtBound", err)
			}
			if p := l.Peek("k"); p != before {
				t.Errorf("after the refused charges: %+v, was %+v", p, before)
			}
			// The global cap charged nothing either: 97 more pass.
			if d := l.AllowN("other", 7); !d.Allowed || d.Remaining != 3 {
				t.Errorf("another key after the refused charges: %+v", d)
			}
		})
	}
}

// TestChargeGlobalCap: the global cap is charged as the key is, and its
// debt refuses every key.
func TestChargeGlobalCap(t *testing.T) {
	clock := floodgate.NewManualClock(int64(time.Hour))
	l := newLimiter(t, floodgate.Config{Rule: chargeRule, Clock: clock, Global: &floodgate.Rule{Limit: 20, Period: time.Second}})
	if d, err := l.Charge("a", 25); err != nil || d.Owed != 15 {
		t.Fatalf("Charge(25): %+v, %v", d, err)
	}
	if l.Allow("b") {
		t.Fatal("another key admitted while the global cap owes 5")
	}
	clock.Advance(300 * time.Millisecond) // the cap has paid its 5 and holds 1; "a" still owes 12
	if l.Allow("a") || !l.Allow("b") || l.Allow("c") {
		t.Fatal("after 300 ms: want a refused, b admitted, then c refused")
	}
}

// TestChargeCustomAlgorithm: a registered algorithm whose states are not
// Chargers refuses Charge with ErrCannotCharge.
func TestChargeCustomAlgorithm(t *testing.T) {
	name := "charge_test_quota"
	if err := testhook.Register(name, newQuota); err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, floodgate.Config{Algorithm: name, Rule: chargeRule})
	if _, err := l.Charge("k", 1); !errors.Is(err, keystate.ErrCannotCharge) {
		t.Fatalf("Charge on a registered algorithm: %v", err)
	}
}

// TestReserveSettle: Settle gives back an over-estimate and charges an
// overrun; it settles once; a refused reservation has nothing to settle.
func TestReserveSettle(t *testing.T) {
	for _, alg := range every {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock})
			r := l.Reserve("k", 6)
			if d := r.Decision(); !d.Allowed || d.Remaining != 4 {
				t.Fatalf("Reserve(6): %+v", d)
			}
			if _, err := r.Settle(-1); err == nil {
				t.Fatal("Settle(-1): no error")
			}
			if d, err := r.Settle(2); err != nil || d.Remaining != 8 || d.Owed != 0 {
				t.Fatalf("Settle(2) of 6: %+v, %v; want 8 left", d, err)
			}
			if _, err := r.Settle(2); !errors.Is(err, floodgate.ErrSettled) {
				t.Fatalf("a second Settle: %v", err)
			}
			r2 := l.Reserve("k", 5)
			if d, err := r2.Settle(12); err != nil || d.Remaining != 0 || d.Owed != 4 {
				t.Fatalf("Settle(12) of 5 with 8 left: %+v, %v; want 4 owed", d, err)
			}
			r3 := l.Reserve("k", 1)
			if r3.Decision().Allowed {
				t.Fatal("Reserve admitted while owing")
			}
			if _, err := r3.Settle(1); !errors.Is(err, floodgate.ErrNotReserved) {
				t.Fatalf("Settle of a refused reservation: %v", err)
			}
			var zero floodgate.Reservation
			if _, err := zero.Settle(1); !errors.Is(err, floodgate.ErrNotReserved) {
				t.Fatalf("Settle of the zero Reservation: %v", err)
			}
			// A reservation never settled keeps its estimate.
			clock.Advance(10 * time.Second)
			_ = l.Reserve("k", 7)
			if d := l.Peek("k"); d.Remaining != 2 { // 3 left, less the one Peek asks
				t.Fatalf("after an unsettled reservation of 7: %+v", d)
			}
			// An overrun past what the key can owe changes nothing, and
			// the reservation stays open.
			r4 := l.Reserve("k", 1)
			before := l.Peek("k")
			if _, err := r4.Settle(math.MaxInt64); !errors.Is(err, floodgate.ErrDebtBound) {
				t.Fatalf("Settle(MaxInt64): %v", err)
			}
			if p := l.Peek("k"); p != before {
				t.Fatalf("a refused overrun changed the key: %+v, was %+v", p, before)
			}
			if d, err := r4.Settle(0); err != nil || d.Remaining != 3 {
				t.Fatalf("Settle(0) after the refused overrun: %+v, %v", d, err)
			}
		})
	}
}

// TestChargeAllocatesNothing: Charge, and Reserve with its Settle, on
// existing keys allocate nothing.
func TestChargeAllocatesNothing(t *testing.T) {
	for _, alg := range every {
		clock := floodgate.NewManualClock(int64(time.Hour))
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 100, Period: time.Millisecond}, Clock: clock})
		keys := []string{"a", "b", "c"}
		i := 0
		round := func() {
			k := keys[i%len(keys)]
			l.Charge(k, 1)
			r := l.Reserve(k, 2)
			r.Settle(1)
			clock.Advance(100 * time.Microsecond)
			i++
		}
		for range 3000 {
			round()
		}
		if allocs := testing.AllocsPerRun(1000, round); allocs != 0 {
			t.Errorf("%s: %.2f allocations per Charge, Reserve and Settle", alg, allocs)
		}
	}
}

// TestSettleConcurrent: 64 goroutines on more Ps than cores reserve
// random estimates on a few keys, settle them to random costs, and charge
// in between, with the clock frozen, so that the keys go deep into debt
// and out of room many times. At the end each key has taken exactly what
// was settled and charged on it, no more, no less, by its Peek; a
// sliding log, whose settlements lapse when another request of the key
// was charged after the reservation, holds at least that, and at most
// that and what the lapsed settlements had to give back. Every algorithm
// and twin.
//
// And at every instant: no reservation is admitted while its key holds
// less than its estimate (owing, or not). Each admission is checked
// against a lower bound of what its key had taken when it was decided:
// what the calls that returned before it began took, less every give-back
// that began before it returned.
func TestSettleConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	const keys, workers, rounds = 3, 64, 200
	rule := floodgate.Rule{Limit: 5000, Period: time.Hour}
	for _, alg := range every {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: rule, Clock: clock})
			var taken, given [keys]atomic.Int64 // given: what settlements gave back
			// done: what returned calls took; back: what give-backs begun
			// gave back (see the observer above).
			var done, back [keys]atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 42))
					for range rounds {
						k := rng.IntN(keys)
						key := "key-" + strconv.Itoa(k)
						if rng.IntN(4) == 0 {
							n := rng.Int64N(50) + 1
							if _, err := l.Charge(key, n); err != nil {
								t.Error(err)
								return
							}
							taken[k].Add(n)
							done[k].Add(n)
							continue
						}
						est := rng.Int64N(100) + 1
						before := done[k].Load()
						r := l.Reserve(key, est)
						if !r.Decision().Allowed {
							continue
						}
						if held := before - back[k].Load(); held+est > rule.Limit {
							t.Errorf("key %d: an estimate of %d was admitted when the key had taken at least %d of %d", k, est, held, rule.Limit)
						}
						done[k].Add(est)
						actual := rng.Int64N(150)
						given[k].Add(max(0, est-actual))
						back[k].Add(max(0, est-actual))
						if _, err := r.Settle(actual); err != nil {
							t.Error(err)
							return
						}
						done[k].Add(max(0, actual-est))
						taken[k].Add(actual)
					}
				}()
			}
			wg.Wait()
			for k := range keys {
				d := l.Peek("key-" + strconv.Itoa(k)) // a request of 1, as if taken
				got := rule.Limit + d.Owed
				if d.Allowed {
					got = rule.Limit - d.Remaining - 1
				}
				want := taken[k].Load()
				if strings.HasPrefix(alg, floodgate.SlidingLog) && got >= want && got <= want+given[k].Load() {
					// A log gives back part of a grant only while no later
					// entry of the key was charged (see Settle): under
					// contention some settlements lapse, and the key keeps
					// their estimates, never less than what was settled.
					continue
				}
				if got != want {
					t.Errorf("key %d: the state holds %d taken (Remaining %d, Owed %d), the goroutines settled and charged %d",
						k, got, d.Remaining, d.Owed, want)
				}
			}
		})
	}
}

// FuzzChargeTwins runs the same charges, reservations, settlements,
// requests and changes of rule through the two Limiters of a pair (see
// pairs), over a few keys, with or without a global cap, with or without
// MaxKeys 1 (every key evicts the one held, owing or not, and comes back
// as the sketch remembers it), and requires the same answers from both,
// debts near the bound included.
func FuzzChargeTwins(f *testing.F) {
	for i := range pairs {
		f.Add(uint8(i), uint8(3), uint16(1000), false, false, []byte{0, 1, 2, 40, 41, 42, 80, 81, 120, 160, 200, 240, 3, 4})
		f.Add(uint8(i), uint8(1), uint16(7), true, false, []byte{40, 40, 40, 80, 120, 0, 160, 161, 200, 201, 202, 250})
		f.Add(uint8(i), uint8(15), uint16(60000), false, false, []byte{255, 255, 254, 40, 44, 48, 120, 124, 1, 2, 3, 200})
		// Evicted in debt (MaxKeys 1: every other key evicts it), asked
		// again, charged again, and converted by SetRule while evicted.
		f.Add(uint8(i), uint8(4), uint16(1000), false, true, []byte{76, 0, 202, 160, 202, 241, 202, 43, 202, 2, 202, 242, 202, 165, 202, 1, 202})
		f.Add(uint8(i), uint8(9), uint16(3000), true, true, []byte{85, 159, 0, 202, 245, 202, 164, 202, 3, 202, 244, 202, 1, 202, 166, 202})
	}
	f.Fuzz(func(t *testing.T, pair, limit uint8, periodMs uint16, global, bounded bool, ops []byte) {
		algs := pairs[int(pair)%len(pairs)]
		rule := floodgate.Rule{Limit: int64(limit%16) + 1, Period: time.Duration(periodMs%5000+1) * time.Millisecond}
		var g *floodgate.Rule
		if global {
			g = &floodgate.Rule{Limit: rule.Limit + 2, Period: rule.Period}
		}
		maxKeys := 0
		if bounded {
			maxKeys = 1 // every request of another key evicts the one held
		}
		var ls [2]*floodgate.Limiter
		var clocks [2]*floodgate.ManualClock
		for j := range ls {
			clocks[j] = floodgate.NewManualClock(1 << 50)
			l, err := floodgate.New(testhook.Twins(floodgate.Config{Algorithm: algs[j], Rule: rule, Global: g, Clock: clocks[j], MaxKeys: maxKeys}).(floodgate.Config))
			if err != nil {
				t.Fatal(err)
			}
			ls[j] = l
		}
		testhook.SameKeys(ls[0], ls[1]) // the same sketch cells for every key
		keys := []string{"a", "b", "c"}
		var open [2][]*floodgate.Reservation
		step := rule.Period / time.Duration(rule.Limit)
		for i, op := range ops {
			key := keys[int(op)%len(keys)]
			arg := int64(op%40) / 3 // 0 to 13
			var ds [2]floodgate.Decision
			var errs [2]error
			switch op / 40 {
			case 0:
				for j, l := range ls {
					ds[j] = l.AllowN(key, arg+1)
				}
			case 1:
				n := arg + 1
				if arg == 13 {
					n = math.MaxInt64 / 2 // past every bound
				}
				for j, l := range ls {
					ds[j], errs[j] = l.Charge(key, n)
				}
			case 2:
				for j, l := range ls {
					r := l.Reserve(key, arg) // 0: a check

					ds[j] = r.Decision()
					open[j] = append(open[j], &r)
				}
			case 3:
				if len(open[0]) == 0 {
					continue
				}
				k := int(op) % len(open[0])
				for j := range ls {
					ds[j], errs[j] = open[j][k].Settle(arg * 2)
				}
			case 4:
				for j := range ls {
					clocks[j].Advance(step * time.Duration(arg+1) / 2)
				}
			case 5:
				for j, l := range ls {
					ds[j] = l.Peek(key)
				}
			default: // 240 and on: a change of rule, its limit and period from arg
				r := floodgate.Rule{Limit: arg%5*3 + 1, Period: rule.Period * time.Duration(arg%3+1) / 2}
				for _, l := range ls {
					if err := l.SetRule(r); err != nil {
						t.Fatal(err)
					}
				}
			}
			if ds[0] != ds[1] || (errs[0] == nil) != (errs[1] == nil) || errors.Is(errs[0], floodgate.ErrDebtBound) != errors.Is(errs[1], floodgate.ErrDebtBound) {
				t.Fatalf("%v op %d (%d on %s, %d): %+v, %v vs %+v, %v", algs, i, op/40, key, arg, ds[0], errs[0], ds[1], errs[1])
			}
		}
	})
}

// TestDebtSurvivesEvictionAndRules: a client cannot shed a debt by
// rotating ids until MaxKeys evicts its key, nor by a rule change: the
// key comes back, or is converted, refusing until its debt would have
// been paid. Every algorithm and twin.
func TestDebtSurvivesEvictionAndRules(t *testing.T) {
	for _, alg := range every {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock, MaxKeys: 1})
			if _, err := l.Charge("debtor", 30); err != nil {
				t.Fatal(err)
			}
			for i := range 20 { // other clients take the only slot
				l.Allow("rotating-" + strconv.Itoa(i))
			}
			if l.Allow("debtor") {
				t.Fatal("a key evicted while owing came back with room")
			}
			clock.Advance(3 * time.Second) // every algorithm has paid 20 by then
			if !l.Allow("debtor") {
				t.Fatal("refused after the debt was paid")
			}

			l2 := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock})
			if _, err := l2.Charge("debtor", 30); err != nil {
				t.Fatal(err)
			}
			if err := l2.SetRule(floodgate.Rule{Limit: 20, Period: time.Second}); err != nil {
				t.Fatal(err)
			}
			if d := l2.AllowN("debtor", 1); d.Allowed {
				t.Fatalf("a key owing 20 was admitted after its limit rose to 20: %+v", d)
			}
		})
	}
}

// TestReserveZero: an estimate of 0 takes nothing, is admitted while a
// request of 1 would be, and its Settle charges the whole cost, into
// debt if need be: a check at the request and the cost at its end.
func TestReserveZero(t *testing.T) {
	for _, alg := range every {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock, Global: &floodgate.Rule{Limit: 100, Period: time.Second}})
			r1 := l.Reserve("k", 0)
			r2 := l.Reserve("k", 0)
			if d := r2.Decision(); !d.Allowed || d.Remaining != 10 {
				t.Fatalf("a second check of 0: %+v, want admitted, all 10 left", d)
			}
			if d, err := r1.Settle(6); err != nil || d.Remaining != 4 || d.Owed != 0 {
				t.Fatalf("Settle(6) of a check: %+v, %v", d, err)
			}
			if d, err := r2.Settle(7); err != nil || d.Remaining != 0 || d.Owed != 3 {
				t.Fatalf("Settle(7) of a check with 4 left: %+v, %v; want 3 owed", d, err)
			}
			r3 := l.Reserve("k", 0)
			if r3.Decision().Allowed {
				t.Fatal("a check admitted while the key owes")
			}
			if _, err := r3.Settle(1); !errors.Is(err, floodgate.ErrNotReserved) {
				t.Fatalf("Settle of a refused check: %v", err)
			}
			r4 := l.Reserve("other", 0)
			if d, err := r4.Settle(0); err != nil || d.Remaining != 10 {
				t.Fatalf("Settle(0) of a check: %+v, %v; want nothing taken", d, err)
			}
		})
	}
}
