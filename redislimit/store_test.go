package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testmain"
)

func mustStore(t testing.TB, srv *redistest.Server, cfg Config) *Store {
	t.Helper()
	if cfg.Timeout == 0 {
		// A loaded machine's slow answer is no failure here: a test of
		// timeouts sets its own.
		cfg.Timeout = 10 * time.Second
	}
	s, err := NewStore(client(t, srv), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() }) // after its policies' users, before its client
	return s
}

// modelDecide is Store.Decide's contract on in-process limiters, written
// from its text: all or nothing by every policy; if an enforced one
// refuses, nothing is charged; if only shadows refuse, the enforced ones
// alone are charged.
func modelDecide(ls []*floodgate.Limiter, key string, n int64, shadow []bool) (refused int, charged []*floodgate.Decision) {
	charged = make([]*floodgate.Decision, len(ls))
	first := func(sh bool) int {
		for i, l := range ls {
			if shadow[i] == sh && !l.Peek(key).Allowed && n == 1 {
				return i
			}
			if shadow[i] == sh && n > 1 {
				panic("the model decides costs of 1")
			}
		}
		return -1
	}
	if e := first(false); e >= 0 {
		return e, charged
	}
	sh := first(true)
	for i, l := range ls {
		if sh >= 0 && shadow[i] {
			continue
		}
		d := l.AllowN(key, n)
		if !d.Allowed {
			panic("a policy refused what its peek admitted")
		}
		charged[i] = &d
	}
	return sh, charged
}

// TestStoreDecideMatchesModel is the multi-policy script's differential
// test: random routes of two to four policies, every algorithm, random
// shadows, decided by the script (on a manual Redis clock) and by the
// model on in-process limiters with the same effective rules, request by
// request: the same policy refuses, the same ones charge, and each
// charged policy's Remaining is the same.
func TestStoreDecideMatchesModel(t *testing.T) {
	trials := 30
	if testmain.Quick() {
		trials = 10
	}
	srv := redistest.Start(t)
	ctx := context.Background()
	s := mustStore(t, srv, Config{Prefix: "multi", Timeout: 10 * time.Second}) // a fallback would fail it
	s.margin = int64(time.Hour / time.Millisecond)                             // the test's clock is not Redis's
	rng := rand.New(rand.NewPCG(34, 1))
	decisions := 0
	var outcomes [3]int // admitted, refused by an enforced policy, by a shadow
	for trial := range trials {
		np := 2 + rng.IntN(3)
		var ps []floodgate.StorePolicy
		var ls []*policy
		var ref []*floodgate.Limiter
		shadow := make([]bool, np)
		clock := floodgate.NewManualClock(0)  // the model's: 1 ns for 1 µs
		rclock := floodgate.NewManualClock(0) // Redis's, as the scripts see it
		s.redisClock = rclock
		var desc []string
		for i := range np {
			alg := redisAlgorithms[rng.IntN(len(redisAlgorithms))]
			rule := randomRule(rng, alg)
			p, err := s.Policy(fmt.Sprintf("t%d/p%d", trial, i), alg, rule)
			for err != nil {
				rule = randomRule(rng, alg)
				p, err = s.Policy(fmt.Sprintf("t%d/p%d", trial, i), alg, rule)
			}
			sp := p.(*policy)
			ps, ls = append(ps, p), append(ls, sp)
			r, err := floodgate.New(floodgate.Config{Algorithm: alg, Rule: effectiveOf(t, sp, alg, rule), Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			ref = append(ref, r)
			shadow[i] = rng.IntN(4) == 0
			desc = append(desc, fmt.Sprintf("%s %+v shadow=%v", alg, rule, shadow[i]))
		}
		now := int64(1_700_000_000_000_000) + rng.Int64N(1_000_000_000)
		minStep := ls[0].rs().interval
		for _, l := range ls {
			minStep = min(minStep, l.rs().interval)
		}
		for op := range 150 {
			now += rng.Int64N(2*minStep + 1)
			clock.Set(now)
			rclock.Set(now * 1000)
			key := fmt.Sprintf("c%d", rng.IntN(2))
			each := make([]floodgate.Decision, np)
			d, refused, err := s.Decide(ctx, asksOf(key, 1, ps, shadow), each)
			if err != nil {
				t.Fatal(err)
			}
			wantRefused, charged := modelDecide(ref, key, 1, shadow)
			if refused != wantRefused {
				t.Fatalf("trial %d op %d at %d µs, %s: refused %d, the model %d\n%s", trial, op, now, key, refused, wantRefused, strings.Join(desc, "\n"))
			}
			if refused < 0 && !d.Allowed || refused >= 0 && !shadow[refused] && d.Allowed {
				t.Fatalf("trial %d op %d: Decision %+v with refused %d", trial, op, d, refused)
			}
			for i := range np {
				if charged[i] != nil {
					want := charged[i].Remaining
					if each[i].Remaining != want || !each[i].Allowed {
						t.Fatalf("trial %d op %d policy %d (%s): %+v, the model has %d remaining", trial, op, i, desc[i], each[i], want)
					}
				}
			}
			decisions++
			switch {
			case refused < 0:
				outcomes[0]++
			case !shadow[refused]:
				outcomes[1]++
			default:
				outcomes[2]++
			}
		}
		for _, p := range ps {
			p.Close()
		}
	}
	if st := storeStats(s); st.Fallbacks != 0 || st.Errors != 0 {
		t.Fatalf("the script failed: %+v", st)
	}
	if outcomes[0] == 0 || outcomes[1] == 0 || outcomes[2] == 0 {
		t.Fatalf("admitted, refused, shadow-refused: %v: the draw tried too little", outcomes)
	}
	t.Logf("%d decisions as the model's: admitted, refused, shadow-refused %v", decisions, outcomes)
}

// storeStats is the Store's Stats.
func storeStats(s *Store) Stats { return s.Stats() }

// TestMultiShortForm holds the multi-policy script's short form, and its
// fast path for windows, to its whole form, call by call: the same
// requests, at the same instants of a manual clock, on two sets of keys,
// one sent in each form. Requests of 1 to 4 asks over buckets, fixed
// windows and sliding counters, with costs to the capacity, shadows, one
// key asked twice, and a clock that steps back: the replies, and every
// key's value, must agree.
func TestMultiShortForm(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	type policy struct{ kind, T, N int64 }
	policies := []policy{{int64(kindBucket), 2000, 4}, {int64(kindFixedWindow), 10_000, 5}, {int64(kindSlidingCounter), 10_000, 6}, {int64(kindFixedWindow), 7_000, 3}}
	now := int64(1_700_000_000_000_000)
	for i := range 3000 {
		switch r := rng.IntN(20); {
		case r == 0:
			now -= rng.Int64N(10_000)
		case r == 1:
			now += rng.Int64N(50_000)
		default:
			now += rng.Int64N(2_000)
		}
		p := 1 + rng.IntN(4)
		var keysA, keysB []string
		flags := make([]byte, p)
		short := []any{now, "", "s"}
		whole := []any{now, ""}
		for j := range p {
			pi := rng.IntN(len(policies))
			pol := policies[pi]
			k := rng.IntN(2)
			keysA = append(keysA, fmt.Sprintf("short:%d:%d", pi, k))
			keysB = append(keysB, fmt.Sprintf("whole:%d:%d", pi, k))
			flags[j] = '0'
			if rng.IntN(8) == 0 {
				flags[j] = '1'
			}
			n := 1 + rng.Int64N(pol.N)
			short = append(short, n, pol.kind, pol.T, pol.N)
			whole = append(whole, 11, n, 0, 0, 0, 0, now, pol.kind, pol.T, pol.N, 1000, 0)
		}
		short[1], whole[1] = string(flags), string(flags)
		a, errA := c.Eval(ctx, multiScript.src, keysA, short...).Int64Slice()
		b, errB := c.Eval(ctx, multiScript.src, keysB, whole...).Int64Slice()
		if fmt.Sprint(a, errA) != fmt.Sprint(b, errB) {
			t.Fatalf("request %d (%d asks, flags %s, at %d): the short form answered %v (%v), the whole %v (%v)", i, p, flags, now, a, errA, b, errB)
		}
		for j := range keysA {
			va, vb := c.Get(ctx, keysA[j]).Val(), c.Get(ctx, keysB[j]).Val()
			if va != vb {
				t.Fatalf("request %d: key %s holds %x in the short form, %x in the whole", i, keysA[j], va, vb)
			}
		}
	}
}

// testAsk is an ask of the tests: N units for Key by Policy.
type testAsk struct {
	Policy floodgate.StorePolicy
	Key    string
	N      int64
}

// asksOf is the asks of a request of cost n from key by ps, shadow
// marking the shadows (nil: none).
func asksOf(key string, n int64, ps []floodgate.StorePolicy, shadow []bool) []floodgate.Ask {
	asks := make([]floodgate.Ask, len(ps))
	for i, p := range ps {
		asks[i] = floodgate.Ask{Policy: p, Key: key, N: n, Shadow: shadow != nil && shadow[i]}
	}
	return asks
}

// decideEach decides asks on s, shadow marking the shadows (nil: none),
// and returns the index of the ask that refused, or -1.
func decideEach(s *Store, ctx context.Context, asks []testAsk, shadow []bool, each []floodgate.Decision) (int, error) {
	fa := make([]floodgate.Ask, len(asks))
	for i, a := range asks {
		fa[i] = floodgate.Ask{Policy: a.Policy, Key: a.Key, N: a.N, Shadow: shadow != nil && shadow[i]}
	}
	_, j, err := s.Decide(ctx, fa, each)
	return j, err
}

// TestMultiBoundIsMaxPolicies: the multi-policy script takes as many
// policies as a decision may have, floodgate.MaxPolicies, and no more.
func TestMultiBoundIsMaxPolicies(t *testing.T) {
	if want := fmt.Sprintf("P >= 1 and P <= %d and", floodgate.MaxPolicies); !strings.Contains(multiSource, want) {
		t.Fatalf("multi.lua does not bound P by %d (want %q)", floodgate.MaxPolicies, want)
	}
}
