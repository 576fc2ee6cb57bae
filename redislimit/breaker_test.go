package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

// TestBreakerRecoversWithinProbeEvery measures how long a Store with
// traffic goes on deciding by its FailureMode once Redis is back, under
// the default ProbeEvery (250 ms). One caller asks every millisecond;
// Redis stops until the breaker has opened, and comes back (SIGCONT)
// just after a probe has failed, the worst moment, as the next probe is
// then a whole ProbeEvery away. The first decision made on Redis comes
// within ProbeEvery and a round trip of its return, which the test
// allows half a second of slack for a loaded machine: under the old
// default of a second, every run would fail.
func TestBreakerRecoversWithinProbeEvery(t *testing.T) {
	srv := redistest.Start(t)
	s := mustStore(t, srv, Config{Timeout: 100 * time.Millisecond, FailureMode: FailOpen, BreakAfter: 1})
	if s.breaker.every != int64(defaultProbeEvery) || defaultProbeEvery > 250*time.Millisecond {
		t.Fatalf("ProbeEvery %v by default, want at most 250 ms", time.Duration(s.breaker.every))
	}
	p := mustPolicy(t, s, "p", floodgate.TokenBucket, floodgate.Rule{Limit: 1_000_000, Period: time.Second})
	onRedis := make(chan time.Time, 1)
	var watch atomic.Bool // set when Redis comes back: the caller reports its first decision on Redis
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var d [1]floodgate.Decision
			if _, _, err := s.Decide(context.Background(), []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, d[:]); err != nil {
				t.Error(err)
				return
			}
			if !d[0].Unreached && watch.CompareAndSwap(true, false) {
				onRedis <- time.Now()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	var worst time.Duration
	for round := range 3 {
		srv.Pause()
		waitUntil(t, "breaker opening", 10*time.Second, func() bool { return s.breaker.openUntil.Load() != closed })
		failed := s.Stats().Errors
		waitUntil(t, "probe failing", 10*time.Second, func() bool { return s.Stats().Errors > failed })
		watch.Store(true)
		back := time.Now()
		srv.Resume()
		var at time.Time
		select {
		case at = <-onRedis:
		case <-time.After(10 * time.Second):
			t.Fatal("no decision on Redis within 10 s of its return")
		}
		took := at.Sub(back)
		worst = max(worst, took)
		t.Logf("round %d: the first decision on Redis came %v after its return (SIGCONT)", round, took.Round(time.Millisecond))
		if bound := defaultProbeEvery + 500*time.Millisecond; took > bound {
			t.Errorf("round %d: the first decision on Redis came %v after its return, past ProbeEvery (%v) and half a second", round, took, defaultProbeEvery)
		}
	}
	t.Logf("worst of 3: %v (ProbeEvery %v)", worst.Round(time.Millisecond), defaultProbeEvery)
}
