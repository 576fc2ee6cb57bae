package redislimit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

func mustPolicy(t testing.TB, s *Store, name, alg string, rule floodgate.Rule) floodgate.StorePolicy {
	t.Helper()
	p, err := s.Policy(name, alg, rule)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestDecideEach: asks with keys and costs of their own, on a real
// redis-server, are all or nothing; a refused request leaves every key
// as it was, and each ask's answer comes back in order.
func TestDecideEach(t *testing.T) {
	srv := redistest.Start(t)
	s := mustStore(t, srv, Config{Timeout: 5 * time.Second, FailureMode: FailClosed})
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			a := mustPolicy(t, s, "a-"+alg, alg, floodgate.Rule{Limit: 10, Period: time.Hour})
			b := mustPolicy(t, s, "b-"+alg, floodgate.FixedWindow, floodgate.Rule{Limit: 4, Period: time.Hour})
			asks := []testAsk{{a, "x", 3}, {b, "y", 2}}
			each := make([]floodgate.Decision, 2)
			for i, want := range []int{-1, -1, 1, 1} {
				got, err := decideEach(s, ctx, asks, nil, each)
				if err != nil || got != want {
					t.Fatalf("request %d: refused by %d (%v), want %d", i, got, err, want)
				}
			}
			// a holds 4 of 10: a request of 4 is admitted, then one of 1
			// is refused by a (the pair's refusals kept no grant).
			if got, err := decideEach(s, ctx, []testAsk{{a, "x", 4}, {b, "z", 1}}, nil, each); got != -1 || err != nil {
				t.Fatalf("4 of a's 4 left: refused by %d (%v)", got, err)
			}
			if each[0].Remaining != 0 {
				t.Fatalf("a's answer %+v, want none left", each[0])
			}
			if got, _ := decideEach(s, ctx, []testAsk{{b, "w", 1}, {a, "x", 1}}, nil, each); got != 1 {
				t.Fatalf("a spent: refused by %d, want 1", got)
			}
			if d, _ := b.(*policy).Peek(ctx, "w"); d.Remaining != 3 {
				t.Fatalf("w holds %d after one more, want 3: the refused request charged it", d.Remaining)
			}
			// Costs past a capacity, or below 1, are refused at once.
			if got, _ := decideEach(s, ctx, []testAsk{{b, "v", 1}, {a, "x", 11}}, nil, each); got != 1 || each[1].RetryAfter != floodgate.Never {
				t.Fatalf("a cost of 11 on 10: refused by %d, %+v", got, each[1])
			}
		})
	}
	if _, err := decideEach(s, ctx, nil, nil, nil); err == nil {
		t.Fatal("no asks: no error")
	}
	other := mustStore(t, srv, Config{Prefix: "other"})
	p := mustPolicy(t, other, "p", "", floodgate.Rule{Limit: 1, Period: time.Second})
	if _, err := decideEach(s, ctx, []testAsk{{p, "k", 1}}, nil, nil); err == nil {
		t.Fatal("another Store's policy: no error")
	}
}

// TestDecideEachReplicas: two Stores on one redis-server, as two
// replicas, race 32 goroutines with pairs of asks: the shared key admits
// exactly its limit, and the other keys show exactly the pairs admitted.
func TestDecideEachReplicas(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			var asks [2][]testAsk
			for r := range 2 {
				s := mustStore(t, srv, Config{Timeout: 5 * time.Second, FailureMode: FailClosed, Prefix: "replicas-" + alg})
				hot := mustPolicy(t, s, "hot", alg, floodgate.Rule{Limit: 150, Period: time.Hour})
				side := mustPolicy(t, s, "side", floodgate.FixedWindow, floodgate.Rule{Limit: 1000, Period: time.Hour})
				asks[r] = []testAsk{{side, "s", 1}, {hot, "h", 1}}
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := asks[g%2][0].Policy.(*policy).s
					for range 10 {
						got, err := decideEach(s, ctx, asks[g%2], nil, nil)
						if err != nil {
							t.Error(err)
							return
						}
						if got < 0 {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != 150 {
				t.Fatalf("admitted %d pairs, want exactly 150", got)
			}
			d, err := asks[0][0].Policy.(*policy).Peek(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != 1000-150-1 {
				t.Fatalf("the side key would leave %d after one more, want %d: a refused pair kept its charge", d.Remaining, 1000-150-1)
			}
		})
	}
}

// TestDecideEachCluster: on a real Redis Cluster, asks whose keys share
// a HashTag are decided in one script, whatever slots their own keys
// hash to; without one, keys on different slots fail with CROSSSLOT,
// which the FailureMode answers.
func TestDecideEachCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := clusterClient(t, cl)
	ctx := context.Background()
	tag := func(key string) string { d, _, _ := strings.Cut(key, "/"); return d }
	s, err := NewStore(c, Config{Timeout: 5 * time.Second, FailureMode: FailClosed, HashTag: tag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	a := mustPolicy(t, s, "a", floodgate.TokenBucket, floodgate.Rule{Limit: 5, Period: time.Hour})
	b := mustPolicy(t, s, "b", floodgate.FixedWindow, floodgate.Rule{Limit: 3, Period: time.Hour})
	var keys []string // keys whose own hashes fall on different slots
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprintf("domain/%d", i)
		if len(keys) == 0 || cl.Slot(a.(*policy).redisKey(k)) == cl.Slot(b.(*policy).redisKey(keys[0])) {
			keys = append(keys, k)
		}
	}
	if cl.Slot(a.(*policy).redisKey(keys[0])) != cl.Slot(b.(*policy).redisKey(keys[1])) {
		t.Fatal("keys of one tag on different slots")
	}
	admitted := 0
	for range 6 {
		got, err := decideEach(s, ctx, []testAsk{{a, keys[0], 1}, {b, keys[1], 1}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got < 0 {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d, want 3", admitted)
	}
	if d, _ := a.(*policy).Peek(ctx, keys[0]); d.Remaining != 1 {
		t.Fatalf("a would leave %d after one more, want 1: a refused pair kept its charge", d.Remaining)
	}
	// Without a tag, two keys on different slots cannot share a script.
	untagged, err := NewStore(c, Config{Timeout: 5 * time.Second, FailureMode: FailClosed, Prefix: "untagged", BreakAfter: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { untagged.Close() })
	ua := mustPolicy(t, untagged, "a", "", floodgate.Rule{Limit: 5, Period: time.Hour})
	ub := mustPolicy(t, untagged, "b", "", floodgate.Rule{Limit: 5, Period: time.Hour})
	var k1, k2 string
	for i := 0; k2 == ""; i++ {
		k := fmt.Sprint(i)
		switch {
		case k1 == "":
			k1 = k
		case cl.Slot(ua.(*policy).redisKey(k1)) != cl.Slot(ub.(*policy).redisKey(k)):
			k2 = k
		}
	}
	got, err := decideEach(untagged, ctx, []testAsk{{ua, k1, 1}, {ub, k2, 1}}, nil, nil)
	if err != nil || got != 0 {
		t.Fatalf("keys on two slots: refused by %d (%v), want the FailClosed refusal by 0", got, err)
	}
}

// TestHashTagRefusedByNew: a lone Limiter has no tag.
func TestHashTagRefusedByNew(t *testing.T) {
	srv := redistest.Start(t)
	if _, err := New(client(t, srv), Config{Rule: floodgate.Rule{Limit: 1, Period: time.Second}, HashTag: func(k string) string { return k }}); err == nil {
		t.Fatal("New took a HashTag")
	}
}

// TestShadowOverCapacity: a shadow policy asked for more than its
// capacity is refused alone, before the script, and the enforced policy
// beside it is still charged: the request it admits is counted, so a
// weighted request cannot pass an enforced rule through a shadow's
// refusal. Decide and DecideEach, per request and in lease mode.
func TestShadowOverCapacity(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		for _, lease := range []int64{0, 64} {
			t.Run(fmt.Sprintf("%s/lease=%d", alg, lease), func(t *testing.T) {
				s := mustStore(t, srv, Config{Prefix: fmt.Sprintf("shadowcap-%s-%d", alg, lease), Timeout: 5 * time.Second,
					FailureMode: FailClosed, Lease: Lease{Max: lease}})
				a := mustPolicy(t, s, "a", alg, floodgate.Rule{Limit: 5, Period: time.Hour})
				b := mustPolicy(t, s, "b", floodgate.FixedWindow, floodgate.Rule{Limit: 2, Period: time.Hour})
				shadow := []bool{false, true}
				each := make([]floodgate.Decision, 2)
				for i := range 7 {
					got, err := decideEach(s, ctx, []testAsk{{a, "x", 1}, {b, "y", 3}}, shadow, each)
					want := 1 // the shadow's refusal: admitted
					if i >= 5 {
						want = 0 // a's 5 are spent
					}
					if err != nil || got != want {
						t.Fatalf("DecideEach request %d: refused by %d (%v), want %d", i, got, err, want)
					}
					if each[1].Allowed || each[1].RetryAfter != floodgate.Never {
						t.Fatalf("DecideEach request %d: the shadow's answer %+v, want a refusal for ever", i, each[1])
					}
				}
				for i, want := range []int{1, 0} {
					_, got, err := s.Decide(ctx, asksOf("z", 3, []floodgate.StorePolicy{a, b}, shadow), each)
					if err != nil || got != want {
						t.Fatalf("Decide request %d of 3 units: refused by %d (%v), want %d", i, got, err, want)
					}
				}
				// Only the shadow over capacity: it alone refuses.
				if got, err := decideEach(s, ctx, []testAsk{{b, "w", 3}, {b, "v", 5}}, []bool{true, true}, each); err != nil || got != 0 {
					t.Fatalf("two shadows over capacity: refused by %d (%v), want 0", got, err)
				}
			})
		}
	}
}

// TestDecideEachLease: in lease mode, asks of two policies on keys of
// their own are decided from the leases, with no round trip once the
// keys hold them, and three replicas raced by 32 goroutines admit
// exactly the hot key's limit, every algorithm; a refusal charges
// neither key. Redis's clock, and the leases', is a manual one that
// stands still: on the real one, a batch of the log is spendable for
// 100 ms at most, and a loaded machine that took longer over the 20
// requests counted sent the next ones to Redis.
func TestDecideEachLease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			var stores [3]*Store
			var asks [3][]testAsk
			clock := floodgate.NewManualClock(epoch)
			for r := range stores {
				s := frozenStore(t, srv, Config{Timeout: 5 * time.Second, FailureMode: FailClosed, Prefix: "each-lease-" + alg, Lease: Lease{Max: 16}}, clock)
				hot := mustPolicy(t, s, "hot", alg, floodgate.Rule{Limit: 150, Period: time.Hour})
				side := mustPolicy(t, s, "side", floodgate.FixedWindow, floodgate.Rule{Limit: 1000, Period: time.Hour})
				for _, p := range s.live {
					p.s.lease.inline = true // renewals at once, on the request's goroutine
				}
				stores[r], asks[r] = s, []testAsk{{side, "s", 1}, {hot, "h", 1}}
			}
			admitted := 0
			for range 10 {
				if got, err := decideEach(stores[0], ctx, asks[0], nil, nil); err != nil || got >= 0 {
					t.Fatalf("warming: refused by %d (%v)", got, err)
				}
				admitted++
			}
			before := storeStats(stores[0]).Calls
			for range 20 {
				if got, err := decideEach(stores[0], ctx, asks[0], nil, nil); err != nil || got >= 0 {
					t.Fatalf("refused by %d (%v)", got, err)
				}
				admitted++
			}
			if calls := storeStats(stores[0]).Calls - before; calls > 4 {
				t.Errorf("20 requests from leases made %d round trips", calls)
			}
			var raced atomic.Int64
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 10 {
						r := (g + i) % 3
						got, err := decideEach(stores[r], ctx, asks[r], nil, nil)
						if err != nil {
							t.Error(err)
							return
						}
						if got < 0 {
							raced.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			total := int64(admitted) + raced.Load()
			if total > 150 {
				t.Fatalf("admitted %d pairs, the hot rule allows 150", total)
			}
			// Every replica gives its leases back; then Redis holds what
			// the admissions left, on both keys.
			for _, s := range stores {
				for _, p := range s.live {
					if err := p.Close(); err != nil {
						t.Fatal(err)
					}
				}
			}
			peek := func(a testAsk) int64 {
				d, err := a.Policy.(*policy).Peek(ctx, a.Key)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					return 0
				}
				return d.Remaining + 1 // Peek's answer is after one more
			}
			if left := peek(asks[0][1]); total+left != 150 {
				t.Errorf("hot: %d admitted and %d left, want 150 in all", total, left)
			}
			if left := peek(asks[0][0]); total+left != 1000 {
				t.Errorf("side: %d admitted and %d left, want 1000 in all: a refused pair kept its charge", total, left)
			}
		})
	}
}
