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
			asks := []Ask{{a, "x", 3}, {b, "y", 2}}
			each := make([]floodgate.Decision, 2)
			for i, want := range []int{-1, -1, 1, 1} {
				got, err := s.DecideEach(ctx, asks, nil, each)
				if err != nil || got != want {
					t.Fatalf("request %d: refused by %d (%v), want %d", i, got, err, want)
				}
			}
			// a holds 4 of 10: a request of 4 is admitted, then one of 1
			// is refused by a (the pair's refusals kept no grant).
			if got, err := s.DecideEach(ctx, []Ask{{a, "x", 4}, {b, "z", 1}}, nil, each); got != -1 || err != nil {
				t.Fatalf("4 of a's 4 left: refused by %d (%v)", got, err)
			}
			if each[0].Remaining != 0 {
				t.Fatalf("a's answer %+v, want none left", each[0])
			}
			if got, _ := s.DecideEach(ctx, []Ask{{b, "w", 1}, {a, "x", 1}}, nil, each); got != 1 {
				t.Fatalf("a spent: refused by %d, want 1", got)
			}
			if d, _ := b.(*storePolicy).Peek(ctx, "w"); d.Remaining != 3 {
				t.Fatalf("w holds %d after one more, want 3: the refused request charged it", d.Remaining)
			}
			// Costs past a capacity, or below 1, are refused at once.
			if got, _ := s.DecideEach(ctx, []Ask{{b, "v", 1}, {a, "x", 11}}, nil, each); got != 1 || each[1].RetryAfter != floodgate.Never {
				t.Fatalf("a cost of 11 on 10: refused by %d, %+v", got, each[1])
			}
		})
	}
	if _, err := s.DecideEach(ctx, nil, nil, nil); err == nil {
		t.Fatal("no asks: no error")
	}
	other := mustStore(t, srv, Config{Prefix: "other"})
	p := mustPolicy(t, other, "p", "", floodgate.Rule{Limit: 1, Period: time.Second})
	if _, err := s.DecideEach(ctx, []Ask{{p, "k", 1}}, nil, nil); err == nil {
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
			var asks [2][]Ask
			for r := range 2 {
				s := mustStore(t, srv, Config{Timeout: 5 * time.Second, FailureMode: FailClosed, Prefix: "replicas-" + alg})
				hot := mustPolicy(t, s, "hot", alg, floodgate.Rule{Limit: 150, Period: time.Hour})
				side := mustPolicy(t, s, "side", floodgate.FixedWindow, floodgate.Rule{Limit: 1000, Period: time.Hour})
				asks[r] = []Ask{{side, "s", 1}, {hot, "h", 1}}
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := asks[g%2][0].Policy.(*storePolicy).store
					for range 10 {
						got, err := s.DecideEach(ctx, asks[g%2], nil, nil)
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
			d, err := asks[0][0].Policy.(*storePolicy).Peek(ctx, "s")
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
	a := mustPolicy(t, s, "a", floodgate.TokenBucket, floodgate.Rule{Limit: 5, Period: time.Hour})
	b := mustPolicy(t, s, "b", floodgate.FixedWindow, floodgate.Rule{Limit: 3, Period: time.Hour})
	var keys []string // keys whose own hashes fall on different slots
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprintf("domain/%d", i)
		if len(keys) == 0 || cl.Slot(a.(*storePolicy).Key(k)) == cl.Slot(b.(*storePolicy).Key(keys[0])) {
			keys = append(keys, k)
		}
	}
	if cl.Slot(a.(*storePolicy).Key(keys[0])) != cl.Slot(b.(*storePolicy).Key(keys[1])) {
		t.Fatal("keys of one tag on different slots")
	}
	admitted := 0
	for range 6 {
		got, err := s.DecideEach(ctx, []Ask{{a, keys[0], 1}, {b, keys[1], 1}}, nil, nil)
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
	if d, _ := a.(*storePolicy).Peek(ctx, keys[0]); d.Remaining != 1 {
		t.Fatalf("a would leave %d after one more, want 1: a refused pair kept its charge", d.Remaining)
	}
	// Without a tag, two keys on different slots cannot share a script.
	untagged, err := NewStore(c, Config{Timeout: 5 * time.Second, FailureMode: FailClosed, Prefix: "untagged", BreakAfter: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ua := mustPolicy(t, untagged, "a", "", floodgate.Rule{Limit: 5, Period: time.Hour})
	ub := mustPolicy(t, untagged, "b", "", floodgate.Rule{Limit: 5, Period: time.Hour})
	var k1, k2 string
	for i := 0; k2 == ""; i++ {
		k := fmt.Sprint(i)
		switch {
		case k1 == "":
			k1 = k
		case cl.Slot(ua.(*storePolicy).Key(k1)) != cl.Slot(ub.(*storePolicy).Key(k)):
			k2 = k
		}
	}
	got, err := untagged.DecideEach(ctx, []Ask{{ua, k1, 1}, {ub, k2, 1}}, nil, nil)
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
