package memcachelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
)

// TestExactSeveralAsks: requests of two asks each, a key that every
// request names (hot, 500 an hour) and one of 8 clients' (80 an hour
// each, 640 in all), from 64 goroutines over 4 replicas: no key passes
// its rule, and no charge of a refused request stays behind (each key
// holds exactly what the admitted requests took), although the
// requests write the hot key through its groups and give back what a
// later ask refused. The sliding log may keep a charge whose give-back
// lapsed (the doc says so): there, only the bounds are checked.
func TestExactSeveralAsks(t *testing.T) {
	srv := memcachetest.Start(t)
	const replicas, goroutines, requests, hotLimit, clients, clientLimit = 4, 64, 2560, 500, 8, 80
	for _, alg := range algorithms {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(t0)
			var stores [replicas]*Store
			var hot, client [replicas]floodgate.StorePolicy
			for i := range stores {
				stores[i] = newStore(t, newClient(t, srv.Addr()), Config{Prefix: "several:", Clock: clock, FailureMode: FailError})
				hot[i] = mustPolicy(t, stores[i], "hot-"+alg, alg, floodgate.Rule{Limit: hotLimit, Period: time.Hour})
				client[i] = mustPolicy(t, stores[i], "client-"+alg, alg, floodgate.Rule{Limit: clientLimit, Period: time.Hour})
			}
			var admitted, next atomic.Int64
			var per [clients]atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := g % replicas
					for k := next.Add(1); k <= requests; k = next.Add(1) {
						c := int(k) % clients
						asks := []floodgate.Ask{{Policy: hot[r], Key: "all", N: 1}, {Policy: client[r], Key: string(rune('a' + c)), N: 1}}
						d, _, err := stores[r].Decide(context.Background(), asks, nil)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							admitted.Add(1)
							per[c].Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			got := admitted.Load()
			if got > hotLimit {
				t.Errorf("%d admitted; the hot key's rule is %d", got, hotLimit)
			}
			for c := range per {
				if n := per[c].Load(); n > clientLimit {
					t.Errorf("client %c: %d admitted; its rule is %d", 'a'+c, n, clientLimit)
				}
			}
			if alg == floodgate.SlidingLog {
				return
			}
			// What each key holds is what its admitted requests took.
			held := func(p floodgate.StorePolicy, key string, limit, want int64) {
				t.Helper()
				d, err := p.Peek(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				wantRemaining := max(limit-want-1, 0)
				if want >= limit {
					wantRemaining = 0
				}
				if d.Remaining != wantRemaining || d.Allowed != (want < limit) {
					t.Errorf("%s after the run: %+v; want it to hold %d of %d, the admitted requests' (Remaining %d)", key, d, want, limit, wantRemaining)
				}
			}
			held(hot[0], "all", hotLimit, got)
			for c := range per {
				held(client[0], string(rune('a'+c)), clientLimit, per[c].Load())
			}
			t.Logf("%s: %d admitted of %d requests", alg, got, requests)
		})
	}
}
