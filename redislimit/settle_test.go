package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var _ floodgate.Settler = (*Store)(nil)

// storeWith is a Store on c with cfg (a Timeout of 10 s if none), whose
// setup runs before its bookkeeper starts (see newStore), closed when t
// ends.
func storeWith(t *testing.T, c redis.UniversalClient, cfg Config, setup func(*Store)) *Store {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	set, err := readConfig(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(c, set, false, setup)
	t.Cleanup(func() { s.Close() })
	return s
}

// frozenStore is a Store on srv whose scripts read clock for Redis's.
func frozenStore(t *testing.T, srv *redistest.Server, cfg Config, clock *floodgate.ManualClock) *Store {
	t.Helper()
	return storeWith(t, client(t, srv), cfg, func(s *Store) { s.redisClock = clock })
}

// TestStoreReserveSettle: on Redis, with its clock frozen, Reserve takes
// the estimates, Settle gives back what they had over the costs (the key
// holds the cost, exactly, on the buckets and windows, and on a log whose
// entry is still the newest) or charges the overrun into debt, which
// another replica sees; a Hold settles once, a refused one not at all;
// asks of one policy and key settle as one, alone (the policy's script)
// and beside another policy (the multi-policy script).
func TestStoreReserveSettle(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	clock := floodgate.NewManualClock(int64(time.Hour))
	s := frozenStore(t, srv, Config{Prefix: "settle", Timeout: 10 * time.Second}, clock)
	other := frozenStore(t, srv, Config{Prefix: "settle", Timeout: 10 * time.Second}, clock)
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			p := mustPolicy(t, s, alg, alg, floodgate.Rule{Limit: 10, Period: time.Second})
			q := mustPolicy(t, s, alg+"/q", floodgate.FixedWindow, floodgate.Rule{Limit: 100, Period: time.Second})
			for _, asks := range [][]floodgate.Ask{
				{{Policy: p, Key: "one", N: 6}},
				{{Policy: p, Key: "two", N: 6}, {Policy: q, Key: "two", N: 1}},
			} {
				key := asks[0].Key
				var h floodgate.Hold
				if _, j, err := s.Reserve(ctx, asks, nil, &h); err != nil || j != -1 || !h.Admitted {
					t.Fatalf("Reserve: refused %d, %v", j, err)
				}
				if got := heldOn(t, p, key, 10); got != 6 {
					t.Fatalf("after a Reserve of 6: %d taken", got)
				}
				asks[0].N = 2 // the cost; q's stays at its estimate
				each := make([]floodgate.Decision, len(asks))
				d, err := s.Settle(ctx, asks, each, &h)
				if err != nil {
					t.Fatal(err)
				}
				if got := heldOn(t, p, key, 10); got != 2 {
					t.Errorf("%d asks: settled 6 to 2: %d taken, want 2", len(asks), got)
				}
				if len(asks) == 2 && heldOn(t, q, key, 100) != 1 {
					t.Errorf("an ask settled at its estimate: %d taken, want 1", heldOn(t, q, key, 100))
				}
				if !d.Allowed || each[0].Remaining != 8 || d != each[0] {
					t.Errorf("%d asks: after the settlement: %+v, each %+v", len(asks), d, each)
				}
				if _, err := s.Settle(ctx, asks, nil, &h); !errors.Is(err, floodgate.ErrSettled) {
					t.Errorf("a second Settle: %v, want ErrSettled", err)
				}

				// An overrun: reserve 3 (5 taken), the cost is 12 (14 taken).
				asks[0].N = 3
				if _, j, _ := s.Reserve(ctx, asks, nil, &h); j != -1 {
					t.Fatal("a Reserve of 3 with 8 left refused")
				}
				asks[0].N = 12
				d, err = s.Settle(ctx, asks, each, &h)
				if err != nil {
					t.Fatal(err)
				}
				if each[0].Owed != 4 || each[0].Remaining != 0 || d != each[0] {
					t.Errorf("%d asks: settled 3 to 12 with 5 left: %+v, want Owed 4", len(asks), d)
				}
				var refused floodgate.Hold
				if _, j, _ := other.Reserve(ctx, []floodgate.Ask{{Policy: p, Key: key, N: 1}}, nil, &refused); j != 0 || refused.Admitted {
					t.Fatal("a key in debt admitted a Reserve")
				}
				if _, err := s.Settle(ctx, asks, nil, &refused); !errors.Is(err, floodgate.ErrNotReserved) {
					t.Errorf("Settle of a refused Hold: %v, want ErrNotReserved", err)
				}
			}

			// Two asks of one policy and key: reserved 3 + 2 as one, settled
			// to 1 + 1.
			asks := []floodgate.Ask{{Policy: p, Key: "m", N: 3}, {Policy: p, Key: "m", N: 2}}
			var h floodgate.Hold
			if _, j, _ := s.Reserve(ctx, asks, nil, &h); j != -1 {
				t.Fatal("Reserve of 3 + 2 refused")
			}
			asks[0].N, asks[1].N = 1, 1
			if _, err := s.Settle(ctx, asks, nil, &h); err != nil {
				t.Fatal(err)
			}
			if got := heldOn(t, p, "m", 10); got != 2 {
				t.Errorf("3 + 2 settled to 1 + 1: %d taken, want 2", got)
			}
			if _, err := s.Settle(ctx, asks[:1], nil, &floodgate.Hold{Admitted: true, N: 2}); err == nil {
				t.Error("Settle with fewer asks than the Hold's must be an error")
			}
			if _, err := s.Settle(ctx, []floodgate.Ask{{Policy: p, Key: "m", N: 1 << 53}}, nil, &floodgate.Hold{Admitted: true, N: 1}); !errors.Is(err, floodgate.ErrDebtBound) {
				t.Errorf("an overrun of 2^53: %v, want ErrDebtBound", err)
			}
		})
	}
}

// TestStoreReserveCheck: Envoy AI Gateway's pattern on Redis, a budget
// of 1,000 units: a Reserve of 0 (a check) beside a request limit at each
// request, the cost of 600 settled when it ends. The checks admit the
// first two requests, the second's cost leaves the key owing 200, and the
// third check refuses; every unit served is counted, and a refused check
// charges the request limit nothing (the multi-policy script's checks).
// A shadow check that would refuse admits. One check alone is its
// policy's dry run.
func TestStoreReserveCheck(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := frozenStore(t, srv, Config{Prefix: "check", Timeout: 10 * time.Second}, floodgate.NewManualClock(int64(time.Hour)))
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			budget := mustPolicy(t, s, alg, alg, floodgate.Rule{Limit: 1000, Period: time.Hour})
			reqs := mustPolicy(t, s, alg+"/reqs", floodgate.FixedWindow, floodgate.Rule{Limit: 100, Period: time.Hour})
			for _, alone := range []bool{false, true} {
				key := "c" + strconv.FormatBool(alone)
				var admitted []bool
				for range 4 {
					var h floodgate.Hold
					asks := []floodgate.Ask{{Policy: reqs, Key: key, N: 1}, {Policy: budget, Key: key, N: 0}}
					if alone {
						asks = asks[1:]
					}
					each := make([]floodgate.Decision, len(asks))
					_, j, err := s.Reserve(ctx, asks, each, &h)
					if err != nil {
						t.Fatal(err)
					}
					if len(admitted) == 0 && each[len(asks)-1].Remaining != 1000 {
						t.Errorf("alone %v: the first check answers %+v, want Remaining 1000: what the budget holds", alone, each[len(asks)-1])
					}
					admitted = append(admitted, j < 0)
					if j >= 0 {
						if j != len(asks)-1 {
							t.Errorf("refused by ask %d, want the budget's", j)
						}
						continue
					}
					asks[len(asks)-1].N = 600
					if _, err := s.Settle(ctx, asks, nil, &h); err != nil {
						t.Fatal(err)
					}
				}
				if want := []bool{true, true, false, false}; !equalBools(admitted, want) {
					t.Errorf("alone %v: admitted %v, want %v", alone, admitted, want)
				}
				if got := heldOn(t, budget, key, 1000); got != 1200 {
					t.Errorf("alone %v: the budget holds %d, want the 1,200 served", alone, got)
				}
				if got := heldOn(t, reqs, key, 100); !alone && got != 2 {
					t.Errorf("the request limit holds %d, want the 2 admitted: a refused check charges no other ask", got)
				}
			}
			var h floodgate.Hold
			_, j, _ := s.Reserve(ctx, []floodgate.Ask{{Policy: reqs, Key: "cfalse", N: 1}, {Policy: budget, Key: "cfalse", N: 0, Shadow: true}}, nil, &h)
			if j != 1 || !h.Admitted || heldOn(t, reqs, "cfalse", 100) != 3 {
				t.Errorf("a shadow check in debt: refused %d, admitted %v; want the shadow's refusal, admitted, charged", j, h.Admitted)
			}
		})
	}
}

func equalBools(a, b []bool) bool {
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

// TestStoreSettleReplicas: three replicas on one redis-server, with its
// clock frozen, reserve random estimates on two policies at once, settle
// them to random costs and charge between, from 48 goroutines: each key
// then holds exactly what was settled and charged on it (a sliding log
// at least that, and at most that and what its give-backs and its leases'
// returns had, which may lapse), on every algorithm, and in lease mode
// once the replicas have closed and given their leases back.
func TestStoreSettleReplicas(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	settleReplicas(t, func() redis.UniversalClient { return c })
}

// TestStoreSettleCluster is TestStoreSettleReplicas on a Redis Cluster
// of three masters: the three keys lie on different masters, a key's two
// policies in one slot (the client's hash tag).
func TestStoreSettleCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := clusterClient(t, cl)
	settleReplicas(t, func() redis.UniversalClient { return c })
}

// settleReplicas is TestStoreSettleReplicas on the Redis that conn's
// clients reach.
func settleReplicas(t *testing.T, conn func() redis.UniversalClient) {
	ctx := context.Background()
	const keys = 3
	rule := floodgate.Rule{Limit: 3000, Period: time.Hour}
	for _, lease := range []bool{false, true} {
		for _, alg := range redisAlgorithms {
			t.Run(fmt.Sprintf("%s/lease=%v", alg, lease), func(t *testing.T) {
				clock := floodgate.NewManualClock(int64(time.Hour))
				prefix := fmt.Sprintf("settlers-%v", lease)
				store := func(lease bool) *Store {
					cfg := Config{Prefix: prefix, Timeout: 10 * time.Second, FailureMode: FailClosed}
					if lease {
						cfg.Lease = Lease{Max: 64, TTL: time.Hour}
					}
					return storeWith(t, conn(), cfg, func(s *Store) {
						s.redisClock = clock
						if lease {
							s.lease.inline = true
						}
					})
				}
				var stores [3]*Store
				var ps [3][2]floodgate.StorePolicy
				for i := range stores {
					stores[i] = store(lease)
					ps[i] = [2]floodgate.StorePolicy{mustPolicy(t, stores[i], alg, alg, rule), mustPolicy(t, stores[i], alg+"/b", floodgate.TokenBucket, rule)}
				}
				reader := store(false)
				read := [2]floodgate.StorePolicy{mustPolicy(t, reader, alg, alg, rule), mustPolicy(t, reader, alg+"/b", floodgate.TokenBucket, rule)}
				var taken, given [2][keys]atomic.Int64
				var wg sync.WaitGroup
				for w := range 48 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s, p := stores[w%3], ps[w%3]
						rng := rand.New(rand.NewPCG(uint64(w), 11))
						for range 25 {
							k := rng.IntN(keys)
							key := "key-" + strconv.Itoa(k)
							asks := []floodgate.Ask{{Policy: p[0], Key: key}, {Policy: p[1], Key: key}}
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
							var h floodgate.Hold
							if _, j, err := s.Reserve(ctx, asks, nil, &h); err != nil || j >= 0 {
								if err != nil {
									t.Error(err)
								}
								if j == 1 {
									given[0][k].Add(est[0]) // a lease's units put back, which a log may lapse
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
				var leased int64
				for _, s := range stores {
					if lease {
						leased += s.Stats().Leased
					}
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
				}
				if lease && leased == 0 {
					t.Error("no replica took a lease")
				}
				t.Logf("%d units leased", leased)
				for i := range 2 {
					for k := range keys {
						got, want := heldOn(t, read[i], "key-"+strconv.Itoa(k), rule.Limit), taken[i][k].Load()
						if i == 0 && alg == floodgate.SlidingLog && got >= want && got <= want+given[i][k].Load()+leased {
							continue
						}
						if got != want {
							t.Errorf("policy %d, key %d: Redis holds %d taken, the replicas settled and charged %d", i, k, got, want)
						}
					}
				}
			})
		}
	}
}

// leaseStore is a Store in lease mode on srv, whose scripts and leases
// read clock, with renewals and returns made at once on the caller's
// goroutine.
func leaseStore(t *testing.T, srv *redistest.Server, prefix string, clock *floodgate.ManualClock) *Store {
	t.Helper()
	return storeWith(t, client(t, srv), Config{Prefix: prefix, FailureMode: FailClosed, Lease: Lease{Max: 1000, TTL: time.Hour}},
		func(s *Store) {
			s.redisClock = clock
			s.lease.inline = true
		})
}

// TestStoreSettleLease: in lease mode, once a key holds a lease, Charge,
// a Reserve's check and its Settle, and a Reserve of an estimate settled
// below it are all served by the lease, with no round trip: the charge
// and the overrun spent from it, the give-back put back into it. A charge
// larger than the lease holds goes to Redis. When the replica closes and
// gives its leases back, another replica sees exactly what was charged
// and settled (a sliding log at least that: a return at the instant of a
// later entry lapses).
func TestStoreSettleLease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(int64(time.Hour))
			s := leaseStore(t, srv, "settle-lease-"+alg, clock)
			reader := frozenStore(t, srv, Config{Prefix: "settle-lease-" + alg, Timeout: 10 * time.Second}, clock)
			rule := floodgate.Rule{Limit: 100_000, Period: time.Hour}
			p := mustPolicy(t, s, "budget", alg, rule)
			pr := mustPolicy(t, reader, "budget", alg, rule)
			charge := func(n int64) floodgate.Decision {
				t.Helper()
				d, err := s.Charge(ctx, []floodgate.Ask{{Policy: p, Key: "k", N: n}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			total := int64(0)
			for range 40 {
				charge(1) // round trips at first, which ask for a lease, and grow it
				total++
			}
			before := s.Stats().Calls
			for range 10 {
				charge(5)
				total += 5
			}
			asks := []floodgate.Ask{{Policy: p, Key: "k", N: 0}}
			var h floodgate.Hold
			if _, j, err := s.Reserve(ctx, asks, nil, &h); err != nil || j >= 0 {
				t.Fatalf("a check: refused %d, %v", j, err)
			}
			asks[0].N = 7
			if _, err := s.Settle(ctx, asks, nil, &h); err != nil {
				t.Fatal(err)
			}
			total += 7
			asks[0].N = 10
			if _, j, err := s.Reserve(ctx, asks, nil, &h); err != nil || j >= 0 {
				t.Fatalf("a Reserve of 10: refused %d, %v", j, err)
			}
			asks[0].N = 4
			d, err := s.Settle(ctx, asks, nil, &h)
			if err != nil {
				t.Fatal(err)
			}
			total += 4
			if calls := s.Stats().Calls - before; calls > 1 {
				t.Errorf("charges and settlements of 61 units, on a lease of hundreds, made %d round trips (one may renew it)", calls)
			}
			if !d.Allowed || d.Remaining <= 0 || d.Remaining > rule.Limit-total {
				t.Errorf("after the settlement: %+v, want Remaining within %d", d, rule.Limit-total)
			}
			before = s.Stats().Calls
			charge(5000) // past the lease: Redis
			total += 5000
			if calls := s.Stats().Calls - before; calls == 0 {
				t.Error("a charge past the lease made no round trip")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			got := heldOn(t, pr, "k", rule.Limit)
			if got != total && !(alg == floodgate.SlidingLog && got > total && got <= total+1000) {
				t.Errorf("after the replica closed, Redis holds %d taken, the replica charged and settled %d", got, total)
			}
		})
	}
}
