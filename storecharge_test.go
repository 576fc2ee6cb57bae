package floodgate

import (
	"context"
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

	"github.com/floodgate-go/floodgate/internal/testhook"
)

// settleAlgorithms is each built-in algorithm and twin, for the Store's
// charge tests.
var settleAlgorithms = []string{
	TokenBucket, testhook.TokenBucketMutex, LeakyBucket, testhook.LeakyBucketMutex,
	FixedWindow, testhook.FixedWindowMutex, SlidingCounter, testhook.SlidingCounterMutex,
	SlidingLog, testhook.SlidingLogMutex,
}

// held is what key has taken of a policy of limit, by Peek: limit less
// what is left, or limit and what it owes.
func held(t *testing.T, p StorePolicy, key string, limit int64) int64 {
	t.Helper()
	d, err := p.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		return limit - d.Remaining - 1 // Peek answers a request of 1 as if taken
	}
	return limit + d.Owed
}

// TestStoreChargeAllOrNothing: a LocalStore's Charge takes every ask's
// cost, into debt, shadows too; and a charge past a key's debt bound
// charges no ask.
func TestStoreChargeAllOrNothing(t *testing.T) {
	ctx := context.Background()
	for _, alg := range settleAlgorithms {
		t.Run(alg, func(t *testing.T) {
			s := localStore(t, NewManualClock(int64(time.Hour)))
			a := mustPolicy(t, s, "a", alg, Rule{Limit: 10, Period: time.Second})
			b := mustPolicy(t, s, "b", TokenBucket, Rule{Limit: 4, Period: time.Second})
			each := make([]Decision, 2)
			d, err := s.Charge(ctx, []Ask{{Policy: a, Key: "x", N: 13}, {Policy: b, Key: "y", N: 1, Shadow: true}}, each)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Owed != 3 || d != each[0] || each[1].Remaining != 3 || !each[1].Allowed {
				t.Errorf("charged 13 of 10 and a shadow 1 of 4: %+v, each %+v", d, each)
			}
			if _, j := decide(t, s, []Ask{{Policy: a, Key: "x", N: 1}}, nil); j != 0 {
				t.Error("a key in debt admitted a request")
			}
			_, err = s.Charge(ctx, []Ask{{Policy: b, Key: "y", N: 2}, {Policy: a, Key: "x", N: math.MaxInt64}}, nil)
			if !errors.Is(err, ErrDebtBound) {
				t.Fatalf("a charge past the debt bound: %v, want ErrDebtBound", err)
			}
			if got := held(t, b, "y", 4); got != 1 {
				t.Errorf("the ask before the one past its bound holds %d, want 1: a failed Charge charges no ask", got)
			}
			if got := held(t, a, "x", 10); got != 13 {
				t.Errorf("the key past its bound holds %d, want 13", got)
			}
			if _, err := s.Charge(ctx, []Ask{{Policy: a, Key: "x", N: 0}}, nil); err == nil {
				t.Error("a charge of 0 must be an error")
			}
		})
	}
}

// TestStoreReserveSettle: a LocalStore's Reserve takes the estimates,
// Settle gives back what they had over the costs (exactly: the key holds
// the cost) or charges the overrun into debt; a Hold settles once, and a
// refused one not at all. Asks of one policy and key settle as one.
func TestStoreReserveSettle(t *testing.T) {
	ctx := context.Background()
	for _, alg := range settleAlgorithms {
		t.Run(alg, func(t *testing.T) {
			clock := NewManualClock(int64(time.Hour))
			s := localStore(t, clock)
			p := mustPolicy(t, s, "p", alg, Rule{Limit: 10, Period: time.Second})
			q := mustPolicy(t, s, "q", FixedWindow, Rule{Limit: 100, Period: time.Second})
			var h Hold
			asks := []Ask{{Policy: p, Key: "k", N: 6}, {Policy: q, Key: "k", N: 1}}
			if _, j, err := s.Reserve(ctx, asks, nil, &h); err != nil || j != -1 || !h.Admitted {
				t.Fatalf("Reserve: refused %d, %v", j, err)
			}
			if got := held(t, p, "k", 10); got != 6 {
				t.Fatalf("after a Reserve of 6: %d taken", got)
			}
			asks[0].N = 2 // the cost; q's stays at its estimate
			each := make([]Decision, 2)
			d, err := s.Settle(ctx, asks, each, &h)
			if err != nil {
				t.Fatal(err)
			}
			if got := held(t, p, "k", 10); got != 2 {
				t.Errorf("settled 6 to 2: %d taken, want 2", got)
			}
			if got := held(t, q, "k", 100); got != 1 {
				t.Errorf("an ask settled at its estimate: %d taken, want 1", got)
			}
			if !d.Allowed || each[0].Remaining != 8 || d != each[0] {
				t.Errorf("after the settlement: %+v, each %+v", d, each)
			}
			if _, err := s.Settle(ctx, asks, nil, &h); !errors.Is(err, ErrSettled) {
				t.Errorf("a second Settle: %v, want ErrSettled", err)
			}

			// An overrun: reserve 3 (5 taken), the cost is 12 (14 taken).
			asks = []Ask{{Policy: p, Key: "k", N: 3}}
			if _, j, _ := s.Reserve(ctx, asks, nil, &h); j != -1 {
				t.Fatal("a Reserve of 3 with 8 left refused")
			}
			asks[0].N = 12
			d, err = s.Settle(ctx, asks, nil, &h)
			if err != nil {
				t.Fatal(err)
			}
			if d.Owed != 4 || d.Remaining != 0 {
				t.Errorf("settled 3 to 12 with 5 left: %+v, want Owed 4", d)
			}
			var refused Hold
			if _, j, _ := s.Reserve(ctx, []Ask{{Policy: p, Key: "k", N: 1}}, nil, &refused); j != 0 || refused.Admitted {
				t.Fatal("a key in debt admitted a Reserve")
			}
			if _, err := s.Settle(ctx, []Ask{{Policy: p, Key: "k", N: 1}}, nil, &refused); !errors.Is(err, ErrNotReserved) {
				t.Errorf("Settle of a refused Hold: %v, want ErrNotReserved", err)
			}

			// Two asks of one policy and key: reserved 3 + 2 as one, settled
			// to 1 + 1, on another key.
			asks = []Ask{{Policy: p, Key: "m", N: 3}, {Policy: p, Key: "m", N: 2}}
			if _, j, _ := s.Reserve(ctx, asks, nil, &h); j != -1 {
				t.Fatal("Reserve of 3 + 2 refused")
			}
			asks[0].N, asks[1].N = 1, 1
			if _, err := s.Settle(ctx, asks, nil, &h); err != nil {
				t.Fatal(err)
			}
			if got := held(t, p, "m", 10); got != 2 {
				t.Errorf("3 + 2 settled to 1 + 1: %d taken, want 2", got)
			}
			if _, err := s.Settle(ctx, asks[:1], nil, &Hold{Admitted: true, N: 2}); err == nil {
				t.Error("Settle with fewer asks than the Hold's must be an error")
			}
		})
	}
}

// TestStoreReserveCheck: Envoy AI Gateway's pattern on a LocalStore, a
// budget of 1,000 units: a Reserve of 0 (a check) at each request, the
// cost of 600 settled when it ends. The check admits the first two
// requests, the second's cost leaves the key owing 200, and the third
// check refuses; every unit served is counted. A refused enforced check
// charges the request's other asks nothing; a refused shadow check
// refuses nothing.
func TestStoreReserveCheck(t *testing.T) {
	ctx := context.Background()
	for _, alg := range settleAlgorithms {
		t.Run(alg, func(t *testing.T) {
			s := localStore(t, NewManualClock(int64(time.Hour)))
			budget := mustPolicy(t, s, "budget", alg, Rule{Limit: 1000, Period: time.Hour})
			reqs := mustPolicy(t, s, "reqs", FixedWindow, Rule{Limit: 100, Period: time.Hour})
			var admitted []bool
			for range 4 {
				var h Hold
				asks := []Ask{{Policy: reqs, Key: "c", N: 1}, {Policy: budget, Key: "c", N: 0}}
				_, j, err := s.Reserve(ctx, asks, nil, &h)
				if err != nil {
					t.Fatal(err)
				}
				admitted = append(admitted, j < 0)
				if j >= 0 {
					if j != 1 {
						t.Errorf("refused by ask %d, want the budget's", j)
					}
					continue
				}
				asks[1].N = 600
				if _, err := s.Settle(ctx, asks, nil, &h); err != nil {
					t.Fatal(err)
				}
			}
			if want := []bool{true, true, false, false}; !equal(admitted, want) {
				t.Errorf("admitted %v, want %v", admitted, want)
			}
			if got := held(t, budget, "c", 1000); got != 1200 {
				t.Errorf("the budget holds %d, want the 1,200 served", got)
			}
			if got := held(t, reqs, "c", 100); got != 2 {
				t.Errorf("the request limit holds %d, want the 2 admitted: a refused check charges no other ask", got)
			}
			// A shadow check that would refuse admits.
			var h Hold
			_, j, _ := s.Reserve(ctx, []Ask{{Policy: reqs, Key: "c", N: 1}, {Policy: budget, Key: "c", N: 0, Shadow: true}}, nil, &h)
			if j != 1 || !h.Admitted || held(t, reqs, "c", 100) != 3 {
				t.Errorf("a shadow check in debt: refused %d, admitted %v; want the shadow's refusal, admitted, charged", j, h.Admitted)
			}
		})
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStoreSettleAllocatesNothing: Charge, Reserve and Settle on a
// LocalStore's existing keys allocate nothing.
func TestStoreSettleAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	clock := NewManualClock(int64(time.Hour))
	s := localStore(t, clock)
	for _, alg := range settleAlgorithms {
		p := mustPolicy(t, s, alg, alg, Rule{Limit: 100, Period: time.Millisecond})
		asks := []Ask{{Policy: p, Key: "a", N: 2}}
		each := make([]Decision, 1)
		var h Hold
		round := func() {
			asks[0].N = 2
			s.Reserve(ctx, asks, each, &h)
			asks[0].N = 1
			s.Settle(ctx, asks, each, &h)
			s.Charge(ctx, asks, each)
			clock.Advance(100 * time.Microsecond)
		}
		for range 1000 {
			round()
		}
		if allocs := testing.AllocsPerRun(1000, round); allocs != 0 {
			t.Errorf("%s: %.2f allocations per Reserve, Settle and Charge", alg, allocs)
		}
	}
}

// TestStoreSettleConcurrent: 64 goroutines on more Ps than cores reserve
// random estimates on two policies at once (a key of each), settle them
// to random costs, and charge in between, with the clock frozen, so that
// the keys go deep into debt many times. At the end each key has taken
// exactly what was settled and charged on it (a sliding log at least
// that, and at most that and what its give-backs had, since one may
// lapse: those of Settle and those of a Reserve refused by its other
// policy; see Limiter's Settle). Every algorithm and twin.
func TestStoreSettleConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	const keys, workers, rounds = 3, 64, 150
	rule := Rule{Limit: 5000, Period: time.Hour}
	ctx := context.Background()
	for _, alg := range settleAlgorithms {
		t.Run(alg, func(t *testing.T) {
			s := localStore(t, NewManualClock(int64(time.Hour)))
			ps := [2]StorePolicy{mustPolicy(t, s, "a", alg, rule), mustPolicy(t, s, "b", TokenBucket, rule)}
			var taken, given [2][keys]atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					for range rounds {
						k := rng.IntN(keys)
						key := "key-" + strconv.Itoa(k)
						asks := []Ask{{Policy: ps[0], Key: key}, {Policy: ps[1], Key: key}}
						if rng.IntN(4) == 0 {
							asks[0].N, asks[1].N = rng.Int64N(50)+1, rng.Int64N(50)+1
							if _, err := s.Charge(ctx, asks, nil); err != nil {
								t.Error(err)
								return
							}
							taken[0][k].Add(asks[0].N)
							taken[1][k].Add(asks[1].N)
							continue
						}
						est := [2]int64{rng.Int64N(100), rng.Int64N(100) + 1}
						asks[0].N, asks[1].N = est[0], est[1]
						var h Hold
						if _, j, err := s.Reserve(ctx, asks, nil, &h); err != nil || j >= 0 {
							if j == 1 {
								// Policy 0 was taken and given back: on a
								// log that give-back may lapse.
								given[0][k].Add(est[0])
							}
							continue
						}
						for i := range 2 {
							asks[i].N = rng.Int64N(150)
							given[i][k].Add(max(0, est[i]-asks[i].N))
						}
						if _, err := s.Settle(ctx, asks, nil, &h); err != nil {
							t.Error(err)
							return
						}
						taken[0][k].Add(asks[0].N)
						taken[1][k].Add(asks[1].N)
					}
				}()
			}
			wg.Wait()
			for i, p := range ps {
				for k := range keys {
					got, want := held(t, p, "key-"+strconv.Itoa(k), rule.Limit), taken[i][k].Load()
					if i == 0 && strings.HasPrefix(alg, SlidingLog) && got >= want && got <= want+given[i][k].Load() {
						continue
					}
					if got != want {
						t.Errorf("policy %d, key %d: the state holds %d taken, the goroutines settled and charged %d", i, k, got, want)
					}
				}
			}
		})
	}
}
