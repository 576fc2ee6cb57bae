package memcachelimit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
)

// TestGroupCommit: requests for one key that wait while its lock is
// held are decided in one round, a read and a write, each answered as
// if they had come one after the other: exactly the limit admitted, with
// every Remaining from limit−1 down to 0 once.
func TestGroupCommit(t *testing.T) {
	srv := memcachetest.Start(t)
	const limit, requests = 5, 12
	for _, alg := range algorithms {
		t.Run(alg, func(t *testing.T) {
			s := newStore(t, newClient(t, srv.Addr()), Config{Prefix: "group:", Clock: floodgate.NewManualClock(t0), FailureMode: FailError})
			p := mustPolicy(t, s, "group-"+alg, alg, floodgate.Rule{Limit: limit, Period: time.Hour})
			mk := p.(*policy).key("k")
			stripe := &s.stripes[s.stripe(mk)]
			stripe.Lock() // as a round before would: the requests gather
			var wg sync.WaitGroup
			ds := make([]floodgate.Decision, requests)
			for i := range requests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, _, err := s.Decide(context.Background(), []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, nil)
					if err != nil {
						t.Error(err)
					}
					ds[i] = d
				}()
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				s.gmu.Lock()
				n := 0
				if g := s.gathering[mk]; g != nil {
					n = len(g.ws)
				}
				s.gmu.Unlock()
				if n == requests {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d requests gathered after 30 s", n, requests)
				}
				time.Sleep(time.Millisecond)
			}
			calls := s.Stats().Calls
			stripe.Unlock()
			wg.Wait()
			if got := s.Stats().Calls - calls; got != 2 {
				t.Errorf("%d round trips for %d requests gathered on one key; want 2, a read and a write", got, requests)
			}
			var remaining []int64
			for _, d := range ds {
				if d.Allowed {
					remaining = append(remaining, d.Remaining)
				}
			}
			slices.Sort(remaining)
			if want := []int64{0, 1, 2, 3, 4}; !slices.Equal(remaining, want) {
				t.Errorf("admitted with Remaining %v; want %v, each once", remaining, want)
			}
		})
	}
}
