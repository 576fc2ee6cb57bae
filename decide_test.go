package floodgate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/floodgate-go/floodgate/internal/testmain"
)

// decideAlgorithms are the algorithms of the differential test of Limits
// and LocalStore: every built-in one and its mutex twin.
var decideAlgorithms = []string{
	TokenBucket, LeakyBucket, FixedWindow, SlidingCounter, SlidingLog,
	testhook.TokenBucketMutex, testhook.LeakyBucketMutex, testhook.FixedWindowMutex,
	testhook.SlidingCounterMutex, testhook.SlidingLogMutex,
}

// decideRule is a random rule of algorithm alg, small enough that a few
// requests use it up: half the time with a burst beside the limit, when
// alg takes one.
func decideRule(rng *rand.Rand, alg string) Rule {
	r := Rule{Limit: 1 + rng.Int64N(6), Period: time.Duration(1+rng.IntN(4)) * time.Second}
	if rng.IntN(2) == 0 {
		r.Burst = 1 + rng.Int64N(12)
		if CheckRule(alg, r) != nil {
			r.Burst = 0
		}
	}
	return r
}

// TestLimitsDecideAsLocalStore is the differential test of the two faces
// of the one decision in process: random sequences of requests, each of
// one key and one cost, go to Limits over Limiters of random rules and
// to a LocalStore whose policies have the same rules, every ask of the
// request's key and cost, all on one ManualClock. They must answer
// alike: the Decision, the index of the refusal, and every Limiter's own
// answer in each, of every length; and at the end they hold the same
// keys. A rule changes now and then, on both. Limits' Stats count, for
// every request, an admission by each Limiter if it passed, else a
// denial by each Limiter up to the one that refused: a grant given back
// counts as a denial.
//
// A cost past some rule's capacity (or below 1) is held to less: a Store
// refuses it by its contract before any state is asked, by the first ask
// that no state can admit, where Limits asks its Limiters in order, so
// that one before may refuse first, for want of what it holds.
func TestLimitsDecideAsLocalStore(t *testing.T) {
	rounds, steps := 300, 400
	if testmain.Quick() {
		rounds = 60
	}
	for round := range rounds {
		t.Run(fmt.Sprint(round), func(t *testing.T) { decideAsLocalStore(t, uint64(round), steps) })
	}
}

// decideAsLocalStore is one round of TestLimitsDecideAsLocalStore: steps
// requests on Limits and a Store made from the round's seed.
func decideAsLocalStore(t *testing.T, round uint64, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(56, round))
	clock := NewManualClock(0)
	s := NewLocalStore(LocalStoreConfig{Clock: clock, IdleTTL: Never})
	s.twins = true
	t.Cleanup(func() { s.Close() })
	k := 1 + rng.IntN(MaxPolicies)
	ls := make([]*Limiter, k)
	asks := make([]Ask, k)
	algs := make([]string, k)
	for i := range k {
		algs[i] = decideAlgorithms[rng.IntN(len(decideAlgorithms))]
		rule := decideRule(rng, algs[i])
		cfg, err := s.config(algs[i], rule) // the Store's own Limiter, MaxKeys included
		if err != nil {
			t.Fatal(err)
		}
		cfg.Stats = true
		ls[i] = mustLimiter(t, cfg)
		asks[i].Policy = mustPolicy(t, s, fmt.Sprint(i), algs[i], rule)
	}
	m := mustLimits(t, ls...)
	capacity := func() int64 {
		c := ls[0].rules.Load().capacity
		for _, l := range ls[1:] {
			c = min(c, l.rules.Load().capacity)
		}
		return c
	}
	allowed, denied := make([]int64, k), make([]int64, k) // what Stats must count
	keys := []string{"a", "b", "c"}
	for step := range steps {
		switch x := rng.IntN(100); {
		case x < 40: // at the same instant
		case x < 95:
			clock.Advance(time.Duration(rng.Int64N(int64(time.Second))))
		case x < 98:
			clock.Advance(time.Duration(rng.Int64N(int64(10 * time.Second))))
		default:
			i := rng.IntN(k)
			rule := decideRule(rng, algs[i])
			errL, errS := ls[i].SetRule(rule), asks[i].Policy.SetRule(rule)
			if (errL == nil) != (errS == nil) {
				t.Fatalf("step %d: SetRule(%+v): Limits' %v, the Store's %v", step, rule, errL, errS)
			}
		}
		key := keys[rng.IntN(len(keys))]
		n := 1 + rng.Int64N(capacity())
		bad := rng.IntN(50) == 0
		if bad {
			n = []int64{0, -1, capacity() + 1 + rng.Int64N(20)}[rng.IntN(3)]
		}
		var eachL, eachS []Decision
		if ne := rng.IntN(k + 1); ne > 0 {
			eachL, eachS = make([]Decision, ne), make([]Decision, ne)
		}
		for i := range asks {
			asks[i].Key, asks[i].N = key, n
		}
		dl, rl := m.Decide(key, n, eachL)
		ds, rs, err := s.Decide(ctx, asks, eachS)
		if err != nil {
			t.Fatal(err)
		}
		where := func() string { return fmt.Sprintf("step %d (%v, key %q, n %d)", step, algs, key, n) }
		for i := range k {
			switch {
			case rl < 0:
				allowed[i]++
			case i <= rl:
				denied[i]++
			}
			if st := ls[i].Stats(); st.Allowed != allowed[i] || st.Denied != denied[i] {
				t.Fatalf("%s, refused by %d: Limiter %d counted %d allowed and %d denied, want %d and %d",
					where(), rl, i, st.Allowed, st.Denied, allowed[i], denied[i])
			}
		}
		if bad {
			if dl.Allowed || ds.Allowed || rl < 0 || rs < 0 || rl > rs {
				t.Fatalf("%s: Limits refused by %d %+v, the Store by %d %+v", where(), rl, dl, rs, ds)
			}
			continue
		}
		if dl != ds || rl != rs {
			t.Fatalf("%s: Limits answered %+v refused by %d, the Store %+v refused by %d", where(), dl, rl, ds, rs)
		}
		for i := range eachL {
			if eachL[i] != eachS[i] {
				t.Fatalf("%s: Limiter %d: Limits %+v, the Store %+v", where(), i, eachL[i], eachS[i])
			}
		}
	}
	for i, l := range ls {
		if a, b := l.Len(), s.Limiter(asks[i].Policy).Len(); a != b {
			t.Fatalf("Limiter %d holds %d keys under Limits, %d in the Store", i, a, b)
		}
	}
}
