package redislimit

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestFaceWaitsOnceOnStalledRedis: httplimit on a Store, a route with an
// in-flight policy and a rate, Redis stopped (SIGSTOP). Under FailOpen
// and FailLocal, which let the slot's failed acquisition through to the
// rate's decision, a request waits one Timeout (and a half, for a loaded
// machine), not one for each: the first call that finds Redis failing
// marks the request, and the FailureMode answers its other calls at once.
// It is served, as those modes serve a request Redis cannot decide.
func TestFaceWaitsOnceOnStalledRedis(t *testing.T) {
	for _, mode := range []FailureMode{FailOpen, FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			r := newFaceReplica(t, srv, Config{Prefix: "outage", Timeout: oneTimeout, FailureMode: mode, BreakAfter: 1000},
				httplimit.Config{Default: []httplimit.Policy{{Name: "conc", InFlight: 4}, {Name: "rate", Rule: hourly(1000)}}})
			// Redis loads the scripts before it stops.
			if resp := r.get(t, "/"); resp.StatusCode != http.StatusOK {
				t.Fatalf("with Redis up: %s", resp.Status)
			}
			before := r.store.Stats()
			srv.Pause()
			defer srv.Resume()
			start := time.Now()
			resp := r.get(t, "/")
			took := time.Since(start)
			t.Logf("took %v", took)
			if took > oneTimeout*3/2 {
				t.Errorf("the request took %v, past one Timeout (%v) and a half: it waited once per call", took, oneTimeout)
			}
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%v served %s, want 200", mode, resp.Status)
			}
			if after := r.store.Stats(); after.Timeouts == before.Timeouts {
				t.Fatalf("no call ran out of Timeout: %+v", after)
			}
		})
	}
}

// TestSlotReleaseWhileBreakerOpen: a slot held when Redis stalls is
// released without a wait once the breaker has opened (the release goes
// in the background, and Close waits for it), and its member goes from
// Redis once Redis is back: removed by that release, which Redis answers
// on its return if it returns within the release's Timeout (as here), or
// else expired within SlotTTL, as the member is no longer renewed.
func TestSlotReleaseWhileBreakerOpen(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 3 * time.Second
	s := mustStore(t, srv, Config{Prefix: "release-open", Timeout: timeout, FailureMode: FailClosed, BreakAfter: 1, ProbeEvery: time.Hour})
	sp, err := s.SlotPolicy("slots", 2)
	if err != nil {
		t.Fatal(err)
	}
	slot, ok, err := sp.Acquire(context.Background(), "k")
	if !ok || err != nil {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	c := client(t, srv)
	rkey := sp.(*slotPolicy).key("k")
	held, err := c.ZRange(context.Background(), rkey, 0, -1).Result()
	if err != nil || len(held) != 1 {
		t.Fatalf("Redis holds %v, %v: want the one member", held, err)
	}
	srv.Pause()
	if _, ok, _ := sp.Acquire(context.Background(), "k"); ok {
		t.Fatal("an acquisition that Redis did not answer was granted under FailClosed")
	}
	if st := s.Stats(); st.Opens == 0 {
		t.Fatalf("the breaker did not open: %+v", st)
	}
	start := time.Now()
	if !slot.Release() {
		t.Fatal("the first Release reported false")
	}
	if took := time.Since(start); took > timeout/2 {
		t.Errorf("Release took %v with the breaker open: it waited on Redis", took)
	}
	srv.Resume()
	waitUntil(t, "the released member gone from Redis", 5*timeout, func() bool {
		err := c.ZScore(context.Background(), rkey, held[0]).Err()
		return errors.Is(err, redis.Nil)
	})
}
