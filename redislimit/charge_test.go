package redislimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

// held is what key has taken of policy p of limit on Redis, by its Peek:
// limit less what is left, or limit and what it owes.
func heldOn(t *testing.T, p floodgate.StorePolicy, key string, limit int64) int64 {
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

// TestStoreCharge: the Store's Charge takes each ask's cost on Redis
// whatever the key holds, on every algorithm, alone (its policy's
// script) and with another policy (the multi-policy script): the key
// owes the excess, every replica refuses it, and a charge past a key's
// bound charges no ask. Asks of one policy and key are charged as one.
func TestStoreCharge(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a := mustStore(t, srv, Config{Prefix: "charge", Timeout: 10 * time.Second})
	b := mustStore(t, srv, Config{Prefix: "charge", Timeout: 10 * time.Second}) // another replica
	rule := floodgate.Rule{Limit: 10, Period: time.Hour}
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			pa, err := a.Policy(alg, alg, rule)
			if err != nil {
				t.Fatal(err)
			}
			defer pa.Close()
			pb, err := b.Policy(alg, alg, rule)
			if err != nil {
				t.Fatal(err)
			}
			defer pb.Close()
			other, err := a.Policy(alg+"/other", floodgate.FixedWindow, floodgate.Rule{Limit: 100, Period: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()

			d, err := a.Charge(ctx, []floodgate.Ask{{Policy: pa, Key: "k", N: 13}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Owed != 3 || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Errorf("charged 13 of 10: %+v, want Owed 3 and a wait", d)
			}
			if _, j, err := b.Decide(ctx, []floodgate.Ask{{Policy: pb, Key: "k", N: 1}}, nil); err != nil || j != 0 {
				t.Errorf("another replica admitted a key in debt: refused %d, %v", j, err)
			}
			if got := heldOn(t, pb, "k", 10); got != 13 {
				t.Errorf("another replica sees %d taken, want 13", got)
			}

			// Two policies, a key each, and an ask repeated: one script.
			each := make([]floodgate.Decision, 3)
			asks := []floodgate.Ask{{Policy: pa, Key: "m", N: 4}, {Policy: other, Key: "m", N: 7, Shadow: true}, {Policy: pa, Key: "m", N: 8}}
			d, err = a.Charge(ctx, asks, each)
			if err != nil {
				t.Fatal(err)
			}
			if each[0].Owed != 2 || each[2] != each[0] || each[1].Remaining != 93 || d != each[0] {
				t.Errorf("charged 4 + 8 of 10 and 7 of 100: %+v, each %+v", d, each)
			}

			// Past the bound: nothing is charged, by either script.
			for _, asks := range [][]floodgate.Ask{
				{{Policy: pa, Key: "n", N: 1 << 52}},
				{{Policy: pa, Key: "n", N: 1<<63 - 1}}, // a hits_addend of 2^64-1, clamped
				{{Policy: other, Key: "n", N: 5}, {Policy: pa, Key: "n", N: 1 << 52}},
			} {
				if _, err := a.Charge(ctx, asks, nil); !errors.Is(err, floodgate.ErrDebtBound) {
					t.Fatalf("a charge of 2^52: %v, want ErrDebtBound", err)
				}
			}
			if got := heldOn(t, other, "n", 100); got != 0 {
				t.Errorf("the ask beside one past its bound holds %d, want 0", got)
			}
			if got := heldOn(t, pa, "n", 10); got != 0 {
				t.Errorf("the ask past its bound holds %d, want 0", got)
			}
			if _, err := a.Charge(ctx, []floodgate.Ask{{Policy: pa, Key: "n", N: 0}}, nil); err == nil {
				t.Error("a charge of 0 must be an error")
			}
		})
	}
}

// TestStoreChargeReplicas: three replicas on one redis-server charge one
// budget from 16 goroutines each, and check it between: at the end the
// key holds exactly the sum of the charges, on every algorithm.
func TestStoreChargeReplicas(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var stores [3]*Store
	for i := range stores {
		stores[i] = mustStore(t, srv, Config{Prefix: "replicas", Timeout: 10 * time.Second})
	}
	rule := floodgate.Rule{Limit: 1000, Period: time.Hour}
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			var ps [3]floodgate.StorePolicy
			for i, s := range stores {
				p, err := s.Policy(alg, alg, rule)
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				ps[i] = p
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var sum int64
			for w := range 48 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 9))
					r := w % 3
					for range 20 {
						n := 1 + rng.Int64N(60)
						if _, err := stores[r].Charge(ctx, []floodgate.Ask{{Policy: ps[r], Key: "budget", N: n}}, nil); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						sum += n
						mu.Unlock()
						if _, err := ps[r].Peek(ctx, "budget"); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			// The clock runs on Redis: a bucket refills as the test runs, at
			// most a few units in this time, so it is held to a range.
			got := heldOn(t, ps[0], "budget", rule.Limit)
			slack := int64(0)
			if alg == floodgate.TokenBucket || alg == floodgate.LeakyBucket {
				slack = 5
			}
			if got > sum || got < sum-slack {
				t.Errorf("the budget holds %d, the replicas charged %d", got, sum)
			}
			t.Logf("%s: %d charged, %d held", alg, sum, got)
		})
	}
}
