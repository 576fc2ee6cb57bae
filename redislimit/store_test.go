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
	s, err := NewStore(client(t, srv), cfg)
	if err != nil {
		t.Fatal(err)
	}
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
	s := mustStore(t, srv, Config{Prefix: "multi"})
	rng := rand.New(rand.NewPCG(34, 1))
	decisions := 0
	var outcomes [3]int // admitted, refused by an enforced policy, by a shadow
	for trial := range trials {
		np := 2 + rng.IntN(3)
		var ps []floodgate.StorePolicy
		var ls []*Limiter
		var ref []*floodgate.Limiter
		shadow := make([]bool, np)
		clock := floodgate.NewManualClock(0)  // the model's: 1 ns for 1 µs
		rclock := floodgate.NewManualClock(0) // Redis's, as the scripts see it
		var desc []string
		for i := range np {
			alg := redisAlgorithms[rng.IntN(len(redisAlgorithms))]
			rule := randomRule(rng, alg)
			p, err := s.Policy(fmt.Sprintf("t%d/p%d", trial, i), alg, rule)
			for err != nil {
				rule = randomRule(rng, alg)
				p, err = s.Policy(fmt.Sprintf("t%d/p%d", trial, i), alg, rule)
			}
			sp := p.(*storePolicy)
			sp.margin = int64(time.Hour / time.Millisecond) // the test's clock is not Redis's
			sp.box(sp.rs())
			sp.redisClock = rclock
			ps, ls = append(ps, p), append(ls, sp.Limiter)
			r, err := floodgate.New(floodgate.Config{Algorithm: alg, Rule: effective(t, sp.Limiter, alg, rule), Clock: clock})
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
			d, refused, err := s.Decide(ctx, key, 1, ps, shadow, each)
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

// storeStats is the Store's Stats over its policies, closed ones included.
func storeStats(s *Store) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.retired
	for _, p := range s.live {
		st = addStats(st, p.Stats())
	}
	return st
}
